"""Measuring one training iteration per gradient method: time, memory, gradient error (Fig. 5).

One *iteration* is what a training step costs: ``traj = solve(y0)`` over ``steps`` steps, the loss
``mean((traj - target)²)`` on every time point, and ``torch.autograd.grad(loss, params)``. With
``profile.fused_loss=true`` the same loss goes through ``hnnsym.solve_loss`` (a ``StepLoss``):
checkpoint and symplectic_adjoint fold it into their sweeps and never return the trajectory.

Memory is measured three ways, each defined so that it can be checked:

- ``saved_mb_solve`` / ``saved_mb_forward`` / ``saved_mb_peak`` (any device): the bytes autograd
  keeps for backward,
  counted with ``torch.autograd.graph.saved_tensors_hooks``. Every tensor autograd saves (by an
  op's backward formula or ``ctx.save_for_backward``) is packed by the hook; the meter tracks the
  *unique storages* referenced by live saved tensors (a storage saved twice counts once; a view
  counts its whole storage), adds a storage's bytes when it is first packed and subtracts them when
  the last packed reference is released (when autograd frees the node's saved variables, i.e. after
  that node's backward or when its graph dies). Storages that exist before the iteration (the
  parameters, y0, the target) are not counted. ``saved_mb_solve`` is the live total when the
  trajectory is ready (what the gradient method itself keeps), ``saved_mb_forward`` when the loss
  is ready (what the forward pass leaves for backward); ``saved_mb_peak`` is the maximum over the
  forward *and* backward passes, so the graphs that the adjoint methods build inside their backward
  (one step of stage equations at a time, or the augmented adjoint system) count too, and so do
  the tensors that the symplectic adjoint keeps outside autograd (a chunk's closed-form
  linearisation of f, announced through ``hnnsym.ode.workspace``).
- ``rss_mb`` (CPU): the peak resident set of a fresh Python subprocess running exactly one iteration,
  minus that process's resident set after imports, model, inputs and a tiny warm-up iteration
  (free heap returned by ``malloc_trim``; peak reset through ``/proc/self/clear_refs`` where Linux
  allows, else ``ru_maxrss`` growth). It includes what the saved bytes do not: temporaries,
  allocator slack, recomputed graphs.
- ``cuda_mb`` (CUDA): ``torch.cuda.max_memory_allocated`` after a reset, minus the allocation before
  the iteration. A compiled program's CUDA graphs keep their memory in a pool set aside when they
  were recorded, before the reset: not counted here (``saved_mb_*`` count their saved tensors).

Gradient errors are relative L2 distances over all parameter gradients, in float64 on the timed
run's inputs: ``grad_err_exact`` against the exact gradient of the method's own discretization
(``Method.exact_reference``), ``grad_err_ref`` against the continuous-time gradient (a high-order
integrator at a fraction of dt), ``grad_err_run`` of the timed (float32) gradient. See
``hnnsym.profiling.run.COLUMN_HELP``.

The modules, each importing only those above it:

- ``meter``: ``SavedTensorMeter``, the saved-for-backward byte counter.
- ``plan``: what is profiled (``Method``, ``Setting``, ``ProfileOptions``) and its parsing from
  ``hnnsym/conf/profile.yaml`` (``methods_from_config``, ``from_config``).
- ``iteration``: inputs, model and solver of one iteration, the timed iteration itself, and the
  relative gradient error.
- ``memory``: the peak RSS of one iteration in a fresh process (``rss_subprocess``; its worker is
  ``python -m hnnsym.profiling '<json spec>'``, see ``__main__``).
- ``run``: the run loop over methods and steps (``run_profile``), the columns and gradient errors.
- ``outputs``: summary tables, the figure, ``write_outputs``.
- ``stage``: ``profile(cfg)``, the whole stage without Hydra (``python -m hnnsym.profile``).

This package module imports none of them, so the RSS worker loads only what it measures with.
"""
