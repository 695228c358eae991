# The kit's build and test entry points. `make test` is what the kit's users meet (the host steps,
# then the student's journey); `make test-guest` the tests that run as root in the test guest;
# CI runs both (.ci/run).  `make check` is the fast host-only subset.
PYTHON ?= python3
VM_TIMEOUT ?= 4500

.PHONY: student-release check test test-guest test-all host-tests kmod-test kmod-build vm-image vm-test vm-test-kernel2 vm-test-kernel2-long vm-test-long vm-test-nightly test-student \
	grader-venv test-nightly scorecard clean help

help:
	@echo "make check      host-only tests (fast)"
	@echo "make test       host tests and module builds (the QEMU image built beside them), then test-student"
	@echo "make test-guest the in-VM suite as root in the test guest (its tests not marked nightly)"
	@echo "make test-all   make test, then make test-guest (what CI runs)"
	@echo "make vm-image   build (or reuse) the QEMU lab image"
	@echo "make vm-test    the in-VM suite (not nightly) in the test guest"
	@echo "make vm-test-kernel2  the in-VM module tests (tests/vm/test_kmod.py) not marked nightly on the image's second"
	@echo "                      kernel, Debian's 6.12 (make vm-test-kernel2-long runs them all)"
	@echo "make test-student  the student release's VM under systemd, every lab in JupyterLab through a headless browser"
	@echo "make grader-venv   a Python the grader's sandbox user can run (/opt/cclab-grader)"
	@echo "make test-nightly  what CI leaves out for its time: the tests marked nightly, tests/vmhost, the module tests on 6.12"
	@echo "make test-vagrant  vagrant up with vagrant-libvirt from a clean clone (nightly: .ci/nightly)"
	@echo "make scorecard  run the lab masters in the VM (MODE=quick|full, LABS=...) and regenerate docs/scorecard.md"

check: host-tests kmod-test

# As root the grader runs each submission as nobody, with a Python nobody can run: the host
# tests' Gradescope run takes make grader-venv's (the others grade in this Python, as themselves).
# They run on HOST_TEST_JOBS workers (pytest-xdist; every core by default: 2.5 min on this 2-core
# machine against 3.7 in one process).
HOST_TEST_JOBS ?= auto
host-tests:
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory grader-venv; fi
	CCLAB_GRADER_PYTHON=$(GRADER_VENV)/bin/python $(PYTHON) -m pytest -q -n $(HOST_TEST_JOBS) tests/host

kmod-test:
	@if [ -f kmod/Makefile ]; then $(MAKE) -C kmod test; else echo "kmod/: no modules yet"; fi

# The amd64 objects are kept in build/kmod/<release>/: the lab VM's module tests load the ones
# built for its kernel from the same sources instead of compiling them under emulation.
kmod-build:
	@if [ -f kmod/Makefile ]; then $(MAKE) -C kmod build-all KEEP=$(CURDIR)/build/kmod; else echo "kmod/: no modules yet"; fi

vm-image:
	vm/build-image.sh

# The in-VM suite runs its tests not marked nightly; test-nightly runs the others (the README
# names them).  Each prints the duration of every test phase of 2 s or more (where the test
# targets' time goes).  It runs as root in a guest without systemd: the
# engine, the link emulation, the kernel modules, the lab command.  The labs themselves run in
# test-student, as a student runs them.
# pytest's arguments wherever make test and make test-guest time their tests: every phase of 2 s
# or more is printed
TIMED_PYTEST_ARGS = -v -p no:cacheprovider --durations=0 --durations-min=2
VM_PYTEST = python3 -m pytest $(TIMED_PYTEST_ARGS)
# $(call vm_suite,MARKERS,TESTS): the guest's command for an in-VM run of the TESTS that MARKERS
# (a pytest -m expression; empty: all of them) selects, between guest-diag.sh's start and report, which names the
# kernel it runs on.
vm_suite = sh -c 'vm/guest-diag.sh start; echo "[guest] kernel $$(uname -r)"; \
	  $(VM_PYTEST) $(if $(1),-m "$(1)") $(2); rc=$$?; vm/guest-diag.sh report; exit $$rc'
vm-test: vm-image
	vm/run.sh --timeout $(VM_TIMEOUT) -- $(call vm_suite,not nightly,tests/vm)

# The in-VM tests marked nightly, on the default kernel: SEARCH's two long experiments (the GEO
# exit, the ACK stall), whose behaviours make test checks in lab 4's runs from the browser, and
# the engine's rate and RTT experiments on the links the labs' runs in the browser use (wired,
# Wi-Fi, GEO, LEO and the seed's Starlink link, the lossy link's four algorithms); the README
# names them.
vm-test-long: vm-image
	vm/run.sh --timeout $(VM_TIMEOUT) -- $(call vm_suite,nightly,tests/vm)

# The kit's modules on the image's second kernel (vm/build-image.sh installs Debian's 6.12 series
# beside the default 6.1, with the modules built by DKMS for it): the module tests marked neither
# nightly nor stress, in a guest started as vm-test starts its own, booted with that kernel (the
# stress matrix runs in make test-guest's in-VM suite on 6.1, the kernel the student's VM boots);
# vm-test-kernel2-long runs the whole module suite there, the nightly and stress ones included.
VM_KERNEL2 ?= 6.12
VM_KERNEL2_TIMEOUT ?= 1800
vm-test-kernel2: vm-image
	vm/run.sh --kernel $(VM_KERNEL2) --timeout $(VM_KERNEL2_TIMEOUT) -- \
	  $(call vm_suite,not nightly and not stress,tests/vm/test_kmod.py)
vm-test-kernel2-long: vm-image
	vm/run.sh --kernel $(VM_KERNEL2) --timeout $(VM_KERNEL2_TIMEOUT) -- \
	  $(call vm_suite,,tests/vm/test_kmod.py)

# The tests that boot guests from the host (tests/vmhost): the README's vm/run.sh commands,
# vm/experiment.sh, exit status and interrupts, and `make scorecard` as the README writes it, in a
# clean clone.  Nightly, for CI's time.  The in-VM nightly tests have their own guest steps
# (vm-test-long, vm-test-kernel2-long).
vm-test-nightly: vm-image
	$(PYTHON) -m pytest $(TIMED_PYTEST_ARGS) -s tests/vmhost

# The grader runs each submission as `nobody` when run as root, so it needs a Python nobody can
# run (one under /root is not): a venv of the system's python3 with grading/requirements.txt.
GRADER_VENV ?= /opt/cclab-grader
GRADER_BASE_PYTHON ?= /usr/bin/python3
grader-venv:
	@if $(GRADER_VENV)/bin/python -c 'import otter, nbclient, pandas' 2>/dev/null; then \
	  echo "grader venv: $(GRADER_VENV)"; else \
	  $(GRADER_BASE_PYTHON) -m venv $(GRADER_VENV) && \
	  $(GRADER_VENV)/bin/python -m pip install -q -r grading/requirements.txt && \
	  echo "grader venv: made $(GRADER_VENV)"; fi

# The student's journey (tests/student): the student release's VM under systemd, every lab done
# in JupyterLab through a headless browser as the lab user, each submission graded by the
# instructor's grade.py (as nobody), and the scorecard made from those runs.  Chromium runs at
# the lowest CPU priority: beside the software-emulated guest it once starved it (a lab 1 run
# read packet spacing 1.11x and its fidelity verdict failed, so the grader rightly scored it 0).
# The autograders are built on the host first (otter assign takes minutes a lab in the guest).
# pytest prints the duration of every test phase of 2 s or more; at its end it prints what each
# lab's quick mode cost beyond its flows (a figure, not a test).
DIST = build/dist
STUDENT_RUNS := build/student-runs/$(shell date -u +%Y%m%d-%H%M%S)
test-student: vm-image grader-venv
	$(PYTHON) grading/build.py lab1 lab2 lab3 lab4 lab5 --out $(DIST)
	CCLAB_DIST=$(DIST) CCLAB_STUDENT_RUNS=$(STUDENT_RUNS) CCLAB_GRADER_PYTHON=$(GRADER_VENV)/bin/python \
	  $(PYTHON) -m pytest $(TIMED_PYTEST_ARGS) -s tests/student
	@echo "== what each lab's quick mode cost beyond its flows in this guest (a figure, not a test)"
	@$(PYTHON) bench/lab_overhead.py --kept $(STUDENT_RUNS) || echo "bench/lab_overhead.py: no table (see above)"

# make test: what the kit's users meet.  The host steps (the host tests and the module builds at
# W=1), with the image built (or found current) beside them: it waits on the network and dpkg
# more than on the CPU, and no guest can boot before it anyway.  Its log is printed when it ends;
# a failed build stops make test after the host steps have reported.  Then the student's journey
# (test-student).  The tests that run as root in the test guest are make test-guest, which CI
# runs after make test (.ci/run); make test-all runs both.
IMAGE_LOG = build/image-build.log
test:
	@echo "== $$(date -u +%T) make test: host steps, the image built beside them"
	@mkdir -p build; vm/build-image.sh > $(IMAGE_LOG) 2>&1 & img=$$!; \
	rc=0; $(MAKE) --no-print-directory check kmod-build || rc=$$?; \
	wait $$img; irc=$$?; echo "== vm/build-image.sh (beside the host steps)"; cat $(IMAGE_LOG); \
	[ $$rc -eq 0 ] || exit $$rc; [ $$irc -eq 0 ] || { echo "make test: the image build failed ($$irc)" >&2; exit $$irc; }
	@echo "== $$(date -u +%T) make test: host steps done; the student's journey"
	$(MAKE) --no-print-directory test-student
	@echo "== $$(date -u +%T) make test: done"

# make test-guest: the in-VM suite as root in a guest without systemd (tests/vm, the tests not
# marked nightly: the engine's error and clean-up paths, link emulation, the modules and their
# stress matrix, the lab command as the lab user).  The module tests load the host's W=1 build
# when make kmod-build (or make test) kept one for these sources, and compile in the guest
# otherwise.  What it leaves for CI's time (tests/vmhost, the module tests on 6.12, the tests
# marked nightly) is make test-nightly.
test-guest:
	@echo "== $$(date -u +%T) make test-guest: the in-VM suite"
	$(MAKE) --no-print-directory vm-test
	@echo "== $$(date -u +%T) make test-guest: done"

test-all: test
	$(MAKE) --no-print-directory test-guest

# `vagrant up` for real (tests/vagrant): a clean clone of this repository, a libvirt box made from
# the QEMU image (vm/vagrant-box.sh), vagrant-libvirt under software emulation where KVM cannot run
# a guest, the JupyterLab URL, the forwarded port, a quick lab 1 run over `vagrant ssh`, and
# `vagrant destroy`. Not part of make test or CI (6-7 min under emulation): .ci/nightly runs it
# after make test-nightly, installing libvirt itself. Needs root, vagrant, vagrant-libvirt and a
# running libvirtd.
.PHONY: test-vagrant
test-vagrant:
	$(PYTHON) -m pytest -v -p no:cacheprovider -s tests/vagrant

# What CI leaves out for its time (.ci/nightly runs it, then make test-vagrant).
test-nightly: vm-test-nightly vm-test-long vm-test-kernel2-long

# The repository a course hands to students (no solutions, hidden tests or grading material).
student-release:
	@[ -n "$(DEST)" ] || { echo "make student-release DEST=folder" >&2; exit 2; }
	$(PYTHON) grading/release.py $(DEST)

# The reproduction scorecard from real runs: each lab's master notebook runs in the lab VM in MODE
# and passes its own tests; its results are kept in results/scorecard/MODE/<lab>/ (a failed lab
# keeps its previous results).  Their tables go into the evidence the repository keeps
# (docs/evidence/<mode>.tar.xz; labs that did not run keep what is there), and the table is
# regenerated from that evidence, as a fresh clone can without the VM.
# Quick mode takes about 30 min; full mode's lab 2 alone takes about 5 h (LABS picks labs; CCAS,
# e.g. CCAS=bbr,cubic,westwood with LABS=lab2, limits lab 2's field of algorithms: about 1.5 h).
MODE ?= quick
LABS ?= lab1 lab2 lab3 lab4 lab5
CCAS ?=
scorecard: vm-image
	vm/run.sh --timeout 36000 -- python3 grading/run_master.py $(LABS) --mode $(MODE) --keep results/scorecard \
		$(if $(CCAS),--ccas $(CCAS))
	$(PYTHON) -m grading.evidence pack
	$(PYTHON) -m grading.scorecard --evidence docs/evidence

clean:
	@if [ -f kmod/Makefile ]; then $(MAKE) -C kmod clean; fi
	rm -rf .pytest_cache
