# The two commands a newcomer runs (see README):
#   make demo   the whole story end to end on the local test bed
#   make test   every check and test (what CI runs)
# And for iterating: make check (fmt, clippy, unit tests, the memory and
# tools tiers; no root, sshd, AWS emulator or HAProxy).

CARGO ?= cargo

.PHONY: demo test check doc deps deps-dist lint style lint-aws lint-units lint-workflows deny deny-tool build dist dist-check bench clean-bed

deps:
	./scripts/install-deps.sh

build:
	$(CARGO) build --locked

lint: style
	$(CARGO) clippy --locked --all-targets --features testing,testbed -- -D warnings

# Formatting (rustfmt) and the Python checks (ruff; mypy --strict on the
# bed, mypy.ini): what lint runs besides clippy. make test runs clippy
# inside its test build (scripts/test.sh).
style:
	$(CARGO) fmt --check
	python3 -m ruff check testbed scripts
	python3 -m ruff format --check testbed scripts
	python3 -m mypy

# The IAM policies (parliament), the CloudFormation template (cfn-lint) and
# the AWS steps of the quick starts and other pages that no bed runs
# (botocore's and ParallelCluster's models, CloudFormation's quotas; the
# self-test shows a renamed option or key and a dropped --s3-bucket are
# caught); the
# template's drift from iam/ and the SSM document is a test.
lint-aws:
	python3 scripts/lint_policies.py
	python3 -c 'import sys; from cfnlint.runner import main; sys.argv[0] = "cfn-lint"; sys.exit(main())' cloudformation/hostkeyctl.json
	python3 scripts/check_quickstarts.py docs/quickstart/*.md docs/*.md
	python3 scripts/check_quickstarts.py --self-test docs/quickstart/*.md docs/*.md

# The shipped service's sandbox, scored offline: 4.9 ("OK") or better.
lint-units:
	./scripts/check_units.sh

# The GitHub workflows (.github/workflows: the release), by actionlint, which
# runs shellcheck on each run: script; both from PyPI
# (testbed/requirements.txt). pip's scripts directory goes first on PATH
# (pyenv's shims reach a new script only after a rehash), and a missing
# shellcheck fails here: actionlint would skip it in silence.
lint-workflows:
	PATH="$$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$$PATH"; \
	  shellcheck --version >/dev/null && actionlint .github/workflows/*.yml

# cargo-deny is installed on first use, once. Its own release profile
# (fat LTO, one codegen unit) is for the binaries it ships; a check of
# our Cargo.lock runs as fast without, and builds in a fraction of the time.
deny-tool:
	command -v cargo-deny >/dev/null 2>&1 || CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
	  $(CARGO) install --locked --quiet cargo-deny@0.20.2

deny: deny-tool
	$(CARGO) deny check licenses bans sources

# Unit tests, the memory tier and the tools tier (the built binary, the
# CLI's transcripts, OpenSSH's tools): no root, sshd, AWS emulator or
# HAProxy (the bed tier is feature testbed: make test).
check: lint doc
	$(CARGO) test --locked --features tools

# The library's documentation, private items too, with broken intra-doc
# links denied (make test documents it inside its test build instead:
# scripts/rustc-doc-wrapper.sh).
doc:
	RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -A rustdoc::private_intra_doc_links -A rustdoc::invalid_html_tags" \
	  $(CARGO) doc --locked --no-deps --document-private-items --features testing

# Every test runs with the shipped node build on the bed's nodes (x86_64;
# aarch64 under qemu-user for converge, --check and rollback), after the
# checks of what ships: scripts/test.sh. The tests build in the admin
# build's tree and profile, so every dependency compiles once for both,
# and clippy runs in that build: the same lints as make lint, without a
# check build of every dependency of its own.
# Each stage is timed (scripts/stage.sh); the figures close the output.
# cargo-deny compiles (about 3 minutes) while make deps downloads: the
# two share the deps stage.
test:
	rm -f target/stage-times
	./scripts/stage.sh deps $(MAKE) -j2 --output-sync=target deps deny-tool
	./scripts/stage.sh dist $(MAKE) dist DIST_LAMBDA_ARCHES=x86_64
	./scripts/stage.sh style $(MAKE) style
	./scripts/stage.sh lint-other $(MAKE) lint-aws lint-units lint-workflows deny
	./scripts/stage.sh check-dist python3 scripts/check_dist.py
	./scripts/test.sh
	./scripts/stage.sh --report

# What ships (scripts/dist.sh): the node build for x86_64 and aarch64 and
# glibc 2.17, the admin build, the Lambda zips, .deb and .rpm, SHA256SUMS,
# in dist/. make test passes DIST_LAMBDA_ARCHES=x86_64: the arm64 zip is the
# release workflow's arm64 job (scripts/release-arm64.sh).
deps-dist:
	./scripts/install-dist-deps.sh

DIST_LAMBDA_ARCHES ?= x86_64 arm64
dist: deps-dist
	DIST_LAMBDA_ARCHES="$(DIST_LAMBDA_ARCHES)" ./scripts/dist.sh

# The shipped builds checked: objdump, qemu-user, dpkg-deb, rpm, cargo tree.
dist-check: dist
	python3 scripts/check_dist.py

demo: deps build
	./scripts/demo.sh

bench: deps dist
	python3 scripts/bench.py all
