"""hydra/launcher=slurm and =local (hnnsym/conf/hydra/launcher/): hydra-submitit-launcher's
launchers with hnnsym's failure reports and requeue (the logic: hnnsym.launchers)."""

try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
except ImportError:  # the optional [sweeps] extra is not installed
    submitit_launcher = None

if submitit_launcher is not None:
    from hnnsym.launchers import ReportingLauncher

    class SlurmLauncher(ReportingLauncher, submitit_launcher.SlurmLauncher):
        """Each job a task of a Slurm array."""

    class LocalLauncher(ReportingLauncher, submitit_launcher.LocalLauncher):
        """Each job its own process on this machine (submitit's local executor)."""
