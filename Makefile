# Every target installs first (a no-op when pyproject.toml has not changed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.installed-docs
TORCH := torch==2.13.0

.PHONY: install test test-slurm lint format docs demo example-data bench bench-peer bench-step-ops gpu-check bench-train-time bench-compile-time figure5 table1 double-well-separable figures noise-sweep table-ddlm table-ddlm-two-body chain-pendulum table-chain real-data clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[dev,sweeps,bench]'
	touch $(STAMP)

install: $(STAMP)

# The table(s) of a generated Markdown file into $(DOCS_TABLES)/<name>.md (committed), which the
# results pages include (pymdownx.snippets, docs/papers/*.md): its pipe tables and their **captions**,
# not its title, notes or column help. $(1): the generated file, $(2): <name>, $(3): the make target.
DOCS_TABLES ?= docs/papers/tables
define docs_table
	mkdir -p $(DOCS_TABLES)
	{ echo '<!-- written by make $(3) from $(1); replaced on its next run -->'; echo; \
	  awk '/^\|/ {print; t = 1; next} t {print ""; t = 0} /^\*\*.*\*\*$$/ {print; print ""}' $(1); \
	} > $(DOCS_TABLES)/$(2).md
endef

test: install
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slurm"

# Sweeps on a real single-node Slurm that the tests bring up (.ci/slurm-up.sh: root, apt-get);
# skipped with the reason where it cannot be started. A few minutes.
test-slurm: install
	$(PY) -m pytest -q -m slurm tests/cli/test_slurm.py

# The documentation site (mkdocs.yml, docs/) into site/; --strict: any warning (a broken link, a
# docstring cross-reference that does not resolve) fails the build. Needs no network but PyPI.
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

demo: install
	$(PY) -m hnnsym.generate system=henon_heiles experiment=demo
	$(PY) -m hnnsym.train system=henon_heiles experiment=demo
	$(PY) -m hnnsym.evaluate system=henon_heiles experiment=demo

# A CSV of pendulum "measurements" (header, trial column, dropped frames, wrapped angles, CRLF):
# data/examples/pendulum.csv, for python -m hnnsym.ingest (docs/guide/recordings.md).
example-data: install
	test -f data/examples/pendulum.csv || $(PY) -m hnnsym.data.example

# Paper Fig. 5 (steps 4..32) extended to 1024: memory/time/gradient error of every gradient method.
figure5: install
	$(PY) -m hnnsym.profile
	$(call docs_table,outputs/profile/coupled_oscillator/implicit_midpoint/profile.md,profile,figure5)

# Benchmarks (figures in outputs/profile/.../profile.{csv,md,png}): the headline ratios to backprop
# at 32 and 1024 steps, the memory at 1024 and 8192 steps (keep_every=sqrt), the profile for every
# Gauss–Legendre order, the reversible round trip at 1e6 steps, RATTLE over 1e5 steps, the
# training time of make table1's runs against 52db500 (before the training speed-ups), Table 1's
# This-work row eager against compiled (bench-compile-time), and the training iteration against
# its jitted JAX peer (bench-peer).
bench: install bench-peer
	$(PY) -m hnnsym.profile 'profile.steps=[32,1024]'
	$(call docs_table,outputs/profile/coupled_oscillator/implicit_midpoint/profile.md,profile,bench)
	$(PY) -m hnnsym.profile experiment=profile_memory
	$(PY) -m hnnsym.profile --multirun integrator=implicit_midpoint,gauss_legendre4,gauss_legendre6 'profile.steps=[4,8,16,32,64,128,256]'
	$(PY) benchmarks/reversible_roundtrip.py
	$(PY) benchmarks/rattle_long_run.py
	$(PY) benchmarks/train_time.py --before 52db500
	$(PY) benchmarks/compile_time.py

# One training iteration against the same in jitted JAX, interleaved, pinned, one thread
# (benchmarks/peer_jax.py; outputs/bench/peer/peer.{csv,md,png}); needs the peer extra.
bench-peer: install
	$(PY) -m pip install --quiet -e '.[peer]'
	$(PY) benchmarks/peer_jax.py

# On a CUDA machine: the tests' CUDA cases (exact gradients, compiled = eager) and the profile
# there; a skip message (exit 0) without one. `make gpu-check PY=python` runs them in the
# caller's environment (a cluster's CUDA build of torch, say) and installs nothing.
gpu-check: $(if $(filter command line,$(origin PY)),,install)
	@if $(PY) -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then \
		$(PY) -m pytest -q -k cuda tests/ode/test_fixed_point_sweeps.py tests/ode/test_compiled_step.py && \
		$(PY) -m hnnsym.profile experiment=profile_gpu && \
		$(PY) -m hnnsym.profile experiment=profile_gpu profile.batch=16384 profile.gradient_errors=false; \
	else echo "gpu-check: skipped, no CUDA device (torch.cuda.is_available() is False)"; fi

# Top-level aten ops per step of the headline workload (outputs/bench/step_ops.csv)
bench-step-ops: install
	$(PY) benchmarks/step_ops.py

# Training time of make table1's runs against 52db500 (before the training speed-ups) (outputs/bench/train_time)
bench-train-time: install
	$(PY) benchmarks/train_time.py --before 52db500

# Table 1's "This work" runs (3 systems x 3 seeds, 2 workers) eager against compiled, with a fresh
# compile cache and then a warm one (outputs/bench/compile_time; about 5 minutes on 2 cores)
bench-compile-time: install
	$(PY) benchmarks/compile_time.py

# ---- Table 1 (Choudhary et al.) with its baselines, figures, noise sweep --------------------------------
T1_SYSTEMS := double_well coupled_oscillator henon_heiles
T1_SEEDS := 0 1 2
comma := ,
empty :=
space := $(empty) $(empty)
# $(call csv,a b c): a,b,c (a multirun's sweep)
csv = $(subst $(space),$(comma),$(strip $(1)))
T1_AXES = system=$(subst $(space),$(comma),$(T1_SYSTEMS)) seed=$(subst $(space),$(comma),$(T1_SEEDS))
T1_METHODS := table1,table1_long,table1_smoothed,table1_ema,table1_paper_time,table1_shnn,table1_nssnn,table1_hnn_derivative,table1_node
NOISE_METHODS := table1,table1_smoothed,table1_ema,table1_shnn,table1_nssnn
NOISES := none low medium high
# The runs of a table go to one worker process per core (hydra/launcher=parallel, joblib; every
# run one torch thread, the same bits as one by one). T1_LAUNCHER= runs them one by one.
T1_LAUNCHER ?= hydra/launcher=parallel
# The least-squares floor of the double well's H error on Table 1's noise-0.01 files
DOUBLE_WELL_FLOOR = $(PY) benchmarks/potential_floor.py $(foreach k,$(T1_SEEDS),data/double_well/low/seed$(k).h5)

# $(call generate_missing,<noise levels>[,<systems>]): the data files of T1_SEEDS that are missing
# (systems: T1_SYSTEMS unless given)
define generate_missing
	for s in $(or $(2),$(T1_SYSTEMS)); do for n in $(1); do for k in $(T1_SEEDS); do \
	  test -f data/$$s/$$n/seed$$k.h5 || $(PY) -m hnnsym.generate system=$$s noise=$$n seed=$$k || exit 1; \
	done; done; done
endef

table1: install
	@echo "table1: 9 methods x 3 systems x 3 seeds = 81 runs at noise 0.01 (the paper's budget; 4x its"
	@echo "  epochs for the table1_long row; the paper's training time for table1_paper_time)."
	@echo "  Measured on this 2-core machine from a clean clone with the first 7 methods: about 55 min"
	@echo "  (33 min for install + 9 data files + the 54 paper-budget runs, 21 min for the 9 long runs);"
	@echo "  table1_ema adds 9 paper-budget runs, table1_paper_time 9 runs of about 80 s each."
	@echo "  Finished runs are kept, so a re-run only redoes evaluation. (Those times are one run at a"
	@echo "  time, before the speed-ups; the runs now go to one worker per core: T1_LAUNCHER.)"
	$(call generate_missing,low)
	$(PY) -m hnnsym.train -m experiment=$(T1_METHODS) $(T1_AXES) train.resume=auto $(T1_LAUNCHER)
	$(PY) -m hnnsym.evaluate -m experiment=$(T1_METHODS) $(T1_AXES) eval.figures=false $(T1_LAUNCHER)
	$(PY) -m hnnsym.table1 report.runs=outputs/table1
	$(call docs_table,results/table1.md,table1,table1)
	$(DOUBLE_WELL_FLOOR)

# The double well learned as a separable H (experiment=double_well_separable, 3 seeds, about 100 s
# each) beside what a least-squares potential reaches on the same files (docs/papers/table1.md).
double-well-separable: install
	$(call generate_missing,low,double_well)
	$(PY) -m hnnsym.train -m experiment=double_well_separable seed=$(call csv,$(T1_SEEDS)) train.resume=auto $(T1_LAUNCHER)
	$(PY) -m hnnsym.evaluate -m experiment=double_well_separable seed=$(call csv,$(T1_SEEDS)) eval.figures=false $(T1_LAUNCHER)
	$(PY) -m hnnsym.table1 report.runs=outputs/table1/separable report.out_dir=outputs/table1/separable/report
	$(DOUBLE_WELL_FLOOR)

figures: install
	$(call generate_missing,low)
	$(PY) -m hnnsym.train -m experiment=table1 system=$(subst $(space),$(comma),$(T1_SYSTEMS)) seed=0 train.resume=auto
	$(PY) -m hnnsym.evaluate -m experiment=table1 system=$(subst $(space),$(comma),$(T1_SYSTEMS)) seed=0
	mkdir -p results/figures
	for s in $(T1_SYSTEMS); do for f in training_data hamiltonian phase_portrait energy; do \
	  cp outputs/table1/$$s/hnn/implicit_midpoint-symplectic_adjoint/low/seed0/eval/$$f.png \
	     results/figures/$${s}_$$f.png || exit 1; done; done

noise-sweep: install
	@echo "noise-sweep: 4 methods x 3 systems x 4 noise levels x 3 seeds = 144 runs. Measured on"
	@echo "  this 2-core machine: about 1 h after make table1 (27 more data files 18 min, 108 more"
	@echo "  runs 30 min, evaluation 8 min); the noise=low runs are table1's"
	$(call generate_missing,$(NOISES))
	$(PY) -m hnnsym.train -m experiment=$(NOISE_METHODS) noise=$(subst $(space),$(comma),$(NOISES)) $(T1_AXES) train.resume=auto $(T1_LAUNCHER)
	$(PY) -m hnnsym.evaluate -m experiment=$(NOISE_METHODS) noise=$(subst $(space),$(comma),$(NOISES)) $(T1_AXES) eval.figures=false $(T1_LAUNCHER)
	$(PY) -m hnnsym.table1 report.runs=outputs/table1
	$(call docs_table,results/table1.md,table1,noise-sweep)
	$(call docs_table,results/noise_sweep.md,noise_sweep,noise-sweep)

# ---- Tables 2-3 of Aoshima et al. (DDLM: learning from positions only) -------------------------------
DDLM_SYSTEMS := mass_spring pendulum
DDLM_NOISES := none low
DDLM_SEEDS := 0 1 2 3 4
DDLM_METHODS := ddlm,ddlm_leapfrog,ddlm_symplectic_euler,ddlm_euler,ddlm_leapfrog_proposed
DDLM_AXES = method=$(DDLM_METHODS) noise=$(subst $(space),$(comma),$(DDLM_NOISES)) seed=$(subst $(space),$(comma),$(DDLM_SEEDS))

table-ddlm: install
	@echo "table-ddlm: 5 methods x 2 systems x 2 noise levels x 5 seeds = 100 runs at the paper's"
	@echo "  budget (2,000 / 10,000 Adam steps). Measured on this shared 2-core machine: data 6 min,"
	@echo "  training 66 min with the two noise levels side by side (about 1.5 h in this sequential"
	@echo "  order). Finished runs are kept, so a re-run only re-evaluates (157 s)."
	for s in $(DDLM_SYSTEMS); do for n in $(DDLM_NOISES); do for k in $(DDLM_SEEDS); do \
	  test -f data/ddlm/$$s/$$n/seed$${k}_q.h5 || \
	    $(PY) -m hnnsym.generate experiment=ddlm_$$s noise=$$n seed=$$k || exit 1; \
	done; done; done
	$(PY) -m hnnsym.train -m experiment=$(call csv,$(addprefix ddlm_,$(DDLM_SYSTEMS))) $(DDLM_AXES)
	$(PY) -m hnnsym.evaluate -m experiment=$(call csv,$(addprefix ddlm_,$(DDLM_SYSTEMS))) \
	  $(DDLM_AXES) eval.figures=false
	$(PY) -m hnnsym.table_ddlm report.runs=outputs/ddlm
	$(call docs_table,results/table_ddlm.md,table_ddlm,table-ddlm)
	$(PY) benchmarks/ddlm_energy_floor.py

# The 2-body column at the paper's budget (experiment=ddlm_two_body: 100,000 Adam steps per run).
# Measured per run (docs/papers/ddlm.md, "The 2-body column"): 6-9 min CPU (leapfrog) and 11-14 min CPU
# (proposed) of training, data 25 s CPU per seed; the leapfrog+proposed run trains the leapfrog's
# bits again so that the table finds it: about 1.2 h CPU for seeds 0-2. DDLM_TB_NOISES="none low"
# adds the noise column the paper did not report; DDLM_TB_ARGS adds overrides to every train and
# evaluate run (e.g. "train.epochs=250" for a tenth of the budget). Joins results/table_ddlm.
DDLM_TB_SEEDS ?= 0 1 2
DDLM_TB_NOISES ?= none
DDLM_TB_METHODS ?= ddlm,ddlm_leapfrog,ddlm_leapfrog_proposed
DDLM_TB_ARGS ?=
DDLM_TB_AXES = method=$(DDLM_TB_METHODS) noise=$(subst $(space),$(comma),$(DDLM_TB_NOISES)) \
  seed=$(subst $(space),$(comma),$(DDLM_TB_SEEDS))
table-ddlm-two-body: install
	for n in $(DDLM_TB_NOISES); do for k in $(DDLM_TB_SEEDS); do \
	  test -f data/ddlm/two_body/$$n/seed$${k}_q.h5 || \
	    $(PY) -m hnnsym.generate experiment=ddlm_two_body noise=$$n seed=$$k || exit 1; \
	done; done
	$(PY) -m hnnsym.train -m experiment=ddlm_two_body $(DDLM_TB_AXES) $(DDLM_TB_ARGS) || exit 1
	$(PY) -m hnnsym.evaluate -m experiment=ddlm_two_body $(DDLM_TB_AXES) $(DDLM_TB_ARGS) \
	  eval.figures=false || exit 1
	$(PY) -m hnnsym.table_ddlm report.runs=outputs/ddlm
	$(call docs_table,results/table_ddlm.md,table_ddlm,table-ddlm-two-body)

# ---- Finzi et al.: chain pendulum, CHNN / CLNN vs HNN in angles vs NODE (reduced budget) ----------
# CHAIN_SYSTEM=coupled_pendulum: the reference's 3-D coupled pendulums instead, CHAIN_LINKS their
# number of bobs (no angle-coordinate version: no hnn)
CHAIN_SYSTEM ?= chain_pendulum
CHAIN_SIZE = $(if $(filter coupled_pendulum,$(CHAIN_SYSTEM)),bobs,links)
CHAIN_LINKS ?= 1 2 3 4 5
CHAIN_SEEDS ?= 0 1 2
CHAIN_EPOCHS ?= 100
CHAIN_MODELS ?= chnn clnn $(if $(filter chain_pendulum,$(CHAIN_SYSTEM)),hnn) node
# each model an experiment, hnnsym/conf/experiment/chain_<model>.yaml (also chnn_rattle: CHNN
# trained and rolled out by RATTLE at h = dt/2 with the symplectic adjoint, and chnn_rattle4: by
# RATTLE composed to order 4 at h = dt; Newton tol 1e-5 in float32 training, the default 1e-12 in
# the float64 evaluation: integrator.tol=null below)
CHAIN_NOISE ?= none
# observation steps of the test trajectories: 100 (3 s, the reference's horizon); more (1000: 30 s)
# needs another CHAIN_DATA (an existing data file is kept as it is), and each run is then also
# evaluated over its first 3 s, into <run>/eval_3s
CHAIN_TEST_STEPS ?= 100
# prefixes: data in $(CHAIN_DATA)<N>, runs in $(CHAIN_OUT)<N>/<model>[_<noise>]/seed<k>
CHAIN_DATA ?= data/$(if $(filter coupled_pendulum,$(CHAIN_SYSTEM)),coupled,chain)
CHAIN_OUT ?= outputs/$(if $(filter coupled_pendulum,$(CHAIN_SYSTEM)),coupled,chain)
CHAIN_TAG = $(if $(filter none,$(CHAIN_NOISE)),,_$(CHAIN_NOISE))
CHAIN_SWEEP = experiment=$(call csv,$(addprefix chain_,$(CHAIN_MODELS))) \
  $(if $(filter coupled_pendulum,$(CHAIN_SYSTEM)),system=coupled_pendulum) \
  system.params.$(CHAIN_SIZE)=$(call csv,$(CHAIN_LINKS)) seed=$(call csv,$(CHAIN_SEEDS)) \
  noise=$(CHAIN_NOISE) train.epochs=$(CHAIN_EPOCHS) \
  'data_dir=$(CHAIN_DATA)$${system.params.$(CHAIN_SIZE)}' \
  'run_dir=$(CHAIN_OUT)$${system.params.$(CHAIN_SIZE)}/$${chain_run}$(CHAIN_TAG)/seed$${seed}'

chain-pendulum: install
	@echo "chain-pendulum: $(CHAIN_SYSTEM), $(CHAIN_MODELS) for N in $(CHAIN_LINKS), seeds $(CHAIN_SEEDS), noise $(CHAIN_NOISE),"
	@echo "  $(CHAIN_EPOCHS) epochs (the reference: 2000). Measured on a 2-core machine (docs/papers/constrained.md): the default"
	@echo "  grid (N = 1-5, 4 models, 3 seeds, 100 epochs) 64 min CPU, 44 min wall as two make processes;"
	@echo "  N = 2 at 2000 epochs: CHNN 23 min CPU, chnn_rattle 31 min, chnn_rattle4 56 min"
	for N in $(CHAIN_LINKS); do for k in $(CHAIN_SEEDS); do \
	  for s in $(CHAIN_SYSTEM) $(if $(filter chain_pendulum,$(CHAIN_SYSTEM)),chain_pendulum_angles); do \
	    test -f $(CHAIN_DATA)$$N/$$s/$(CHAIN_NOISE)/seed$$k.h5 || $(PY) -m hnnsym.generate system=$$s \
	      system.params.$(CHAIN_SIZE)=$$N noise=$(CHAIN_NOISE) seed=$$k data_dir=$(CHAIN_DATA)$$N \
	      generate.test_steps=$(CHAIN_TEST_STEPS) || exit 1; \
	  done; \
	done; done
	$(PY) -m hnnsym.train -m $(CHAIN_SWEEP)
	$(PY) -m hnnsym.evaluate -m $(CHAIN_SWEEP) integrator.tol=null
	if [ $(CHAIN_TEST_STEPS) -gt 100 ]; then $(PY) -m hnnsym.evaluate -m $(CHAIN_SWEEP) \
	  integrator.tol=null eval.rollout_steps=100 'eval.out_dir=$${run_dir}/eval_3s' || exit 1; fi
	$(MAKE) --no-print-directory -o install table-chain

# the table of every run under $(CHAIN_OUT)* beside the reference's (results/table_chain.{csv,md}),
# each run read from its 3 s evaluation: eval/, or eval_3s/ when the test trajectories are longer
CHAIN_EVAL_DIR ?= $(if $(filter 100,$(CHAIN_TEST_STEPS)),eval,eval_3s)
CHAIN_RESULTS ?= results
table-chain: install
	$(PY) -m hnnsym.table_chain 'report.runs=$(CHAIN_OUT)*' report.eval_dir=$(CHAIN_EVAL_DIR) \
	  report.out_dir=$(CHAIN_RESULTS)
	$(call docs_table,$(CHAIN_RESULTS)/table_chain.md,table_chain,table-chain)

# ---- Real recordings (../shared/data/real/, its README.md) ingested as shipped -------------------
# Into data/measured/<stem>.h5, in scaled units (ingest.scale=auto). The spring-mass files: a %
# header naming 2 (4) of their 4 (6) columns, so the names are given; one 29 s (16.5 s) run cut
# into blocks of <= 64 (24) steps. The IBM double pendulum: 6 pixel columns, no header, 400 fps,
# subsampled to 100 fps, blocks of <= 128 steps, the last 9 s held out as test, three ways: the
# bobs' positions only (<stem>.h5), the tracked chain (pivot, bob1, bob2; detected) as joint angles
# with smoothed rates (<stem>_angles.h5), and as its points with smoothed velocities
# (<stem>_points.h5); and run 1 as an encoder would log it (<stem>_encoder.h5: angles and rates
# with dropped frames).
# Then: the physical yardstick (benchmarks/real_physical_fit.py: a damped oscillator, coupled
# damped oscillators, fitted on the training split), the models that apply trained and evaluated
# into $(REAL_OUT)/<stem>/<model>/seed<k> (the oscillators: $(REAL_MODELS) with
# experiment=$(REAL_EXPERIMENT), the coupled ones with $(REAL_EXPERIMENT2), seeds $(REAL_SEEDS);
# the double pendulums: experiment=recording_positions (DDLM) on the positions, seed 0;
# experiment=recording_chain (the Lagrangian model with the chain mass matrix) on the angles, seeds
# $(REAL_SEEDS); experiment=recording_points (CHNN, full mass matrix, joint friction) on the points,
# seeds $(REAL_POINTS_SEEDS)), and one table of
# the models against the baselines (no motion, constant velocity, linear) and the physical fit:
# outputs/bench/real/real_table.{csv,md} (docs/guide/recordings.md, "Results on real recordings").
# Wall time on 2 CPU cores: 61 min measured for the whole target. The nine recording_chain runs
# dominate (216-438 s of training each, the mean per file), then the 12 oscillator runs (12-80 s),
# the two CHNN runs (about 105 s) and the rest.
# the folder holding the four recordings (REAL_DIR=<folder>)
REAL_DIR ?= ../shared/data/real
IBM_NAMES := [x0,y0,x1,y1,x2,y2]
IBM_UNITS := {time: s, x0: px, y0: px, x1: px, y1: px, x2: px, y2: px}
IBM_POINTS := {pivot: [x0, y0], bob1: [x1, y1], bob2: [x2, y2]}
REAL_OUT ?= outputs/real
REAL_SEEDS ?= 0 1 2
REAL_MODELS ?= dissipative_hnn lagrangian
# the seeds of the constrained model (CHNN) on the films' tracked points (about 2.5 min a run)
REAL_POINTS_SEEDS ?= 0
# the experiments (hnnsym/conf/experiment/recording*.yaml) of the oscillator, the coupled ones and
# the positions-only double pendulums
REAL_EXPERIMENT ?= recording
REAL_EXPERIMENT2 ?= recording_coupled
REAL_PEND := ibm_double_pendulum_run1 ibm_double_pendulum_run2
# the film rewritten as an angle-encoder log (joint angles and rates at 100 frames/s, 1 % of
# frames dropped: benchmarks/encoder_from_film.py), for want of a public encoder recording
REAL_ENCODER := ibm_double_pendulum_run1
ENCODER_UNITS := {t: s, theta1: rad, theta2: rad, omega1: rad/s, omega2: rad/s}
# $(1): a recording's stem, $(2): its experiment, $(3): models, $(4): seeds: one multirun each of
# train and evaluate, the runs in $(REAL_OUT)/<stem>/<model>/seed<k>
define real_runs
	$(PY) -m hnnsym.train -m system=measured data_file=data/measured/$(1).h5 experiment=$(2) \
	  model=$(call csv,$(3)) seed=$(call csv,$(4)) 'run_dir=$(REAL_OUT)/$(1)/$${model.name}/seed$${seed}' \
	  train.overwrite=true train.progress=false
	$(PY) -m hnnsym.evaluate -m system=measured data_file=data/measured/$(1).h5 experiment=$(2) \
	  model=$(call csv,$(3)) seed=$(call csv,$(4)) 'run_dir=$(REAL_OUT)/$(1)/$${model.name}/seed$${seed}' \
	  eval.figures=false

endef
real-data: install
	$(PY) -m hnnsym.ingest ingest.source=$(REAL_DIR)/lipson_real_linear_h_1.txt \
	  ingest.names=[trial,t,x,v] ingest.trial=trial ingest.positions=[x] ingest.velocities=[v] \
	  'ingest.units={t: s, x: px, v: px/s}' ingest.max_segment=64 ingest.overwrite=true
	$(PY) -m hnnsym.ingest ingest.source=$(REAL_DIR)/lipson_real_double_linear_h_1.txt \
	  ingest.names=[trial,t,x1,x2,v1,v2] ingest.trial=trial ingest.positions=[x1,x2] \
	  ingest.velocities=[v1,v2] 'ingest.units={t: s, x1: px, x2: px, v1: px/s, v2: px/s}' \
	  ingest.max_segment=24 ingest.overwrite=true
	for run in 1 2; do $(PY) -m hnnsym.ingest \
	  ingest.source=$(REAL_DIR)/ibm_double_pendulum_run$$run.csv ingest.names=$(IBM_NAMES) \
	  ingest.time=null ingest.dt=0.0025 ingest.every=4 ingest.positions=[x1,y1,x2,y2] \
	  'ingest.units=$(IBM_UNITS)' ingest.max_segment=128 \
	  'ingest.split={val: 0.15, test: {time: [36.0, 45.0]}}' ingest.overwrite=true || exit 1; \
	  $(PY) -m hnnsym.ingest ingest.source=$(REAL_DIR)/ibm_double_pendulum_run$$run.csv \
	  ingest.names=$(IBM_NAMES) ingest.time=null ingest.dt=0.0025 ingest.every=4 \
	  'ingest.points=$(IBM_POINTS)' ingest.chain=detect ingest.coordinates=angles \
	  ingest.velocities=smoothing 'ingest.units=$(IBM_UNITS)' ingest.max_segment=128 \
	  'ingest.split={val: 0.15, test: {time: [36.0, 45.0]}}' \
	  ingest.name=ibm_double_pendulum_run$${run}_angles ingest.overwrite=true || exit 1; \
	  $(PY) -m hnnsym.ingest ingest.source=$(REAL_DIR)/ibm_double_pendulum_run$$run.csv \
	  ingest.names=$(IBM_NAMES) ingest.time=null ingest.dt=0.0025 ingest.every=4 \
	  'ingest.points=$(IBM_POINTS)' ingest.chain=detect ingest.velocities=smoothing \
	  'ingest.units=$(IBM_UNITS)' ingest.max_segment=128 \
	  'ingest.split={val: 0.15, test: {time: [36.0, 45.0]}}' \
	  ingest.name=ibm_double_pendulum_run$${run}_points ingest.overwrite=true || exit 1; done
	$(PY) benchmarks/encoder_from_film.py $(REAL_DIR)/$(REAL_ENCODER).csv \
	  data/measured/$(REAL_ENCODER)_encoder.csv --overwrite
	$(PY) -m hnnsym.ingest ingest.source=data/measured/$(REAL_ENCODER)_encoder.csv \
	  ingest.positions=[theta1,theta2] ingest.velocities=[omega1,omega2] \
	  ingest.angles=[theta1,theta2] 'ingest.units=$(ENCODER_UNITS)' ingest.max_segment=128 \
	  'ingest.split={val: 0.15, test: {time: [36.0, 45.0]}}' ingest.overwrite=true
	$(PY) benchmarks/real_physical_fit.py data/measured/lipson_real_*.h5 $(foreach f,$(REAL_PEND),\
	  data/measured/$(f).h5 data/measured/$(f)_angles.h5 data/measured/$(f)_points.h5) \
	  data/measured/$(REAL_ENCODER)_encoder.h5
	$(call real_runs,lipson_real_linear_h_1,$(REAL_EXPERIMENT),$(REAL_MODELS),$(REAL_SEEDS))
	$(call real_runs,lipson_real_double_linear_h_1,$(REAL_EXPERIMENT2),$(REAL_MODELS),$(REAL_SEEDS))
	$(foreach f,$(REAL_PEND),$(call real_runs,$(f),recording_positions,potential,0))
	$(foreach f,$(REAL_PEND),$(call real_runs,$(f)_angles,recording_chain,lagrangian,$(REAL_SEEDS)))
	$(call real_runs,$(REAL_ENCODER)_encoder,recording_chain,lagrangian,$(REAL_SEEDS))
	$(foreach f,$(REAL_PEND),$(call real_runs,$(f)_points,recording_points,chnn,$(REAL_POINTS_SEEDS)))
	$(PY) benchmarks/real_table.py --runs $(REAL_OUT)

clean:
	rm -rf outputs data/*/ .pytest_cache site
