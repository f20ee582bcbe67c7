"""hnnsym's Hydra plugins (Hydra loads plugins only from the ``hydra_plugins`` namespace): the
sweeper that collects every failed job (``hnnsym.sweeps``) and the submitit launchers whose jobs
fail visibly, report why, and resume their own run when requeued (``hnnsym.launchers``)."""
