#!/usr/bin/env bash
# The test build's compiler wrapper (RUSTC_WORKSPACE_WRAPPER, scripts/test.sh):
# clippy-driver compiles every crate of the workspace, as `cargo clippy`
# does; and once the library compiled (not its unit tests), rustdoc
# documents it from the same arguments, with broken intra-doc links
# denied. rustdoc then reads the dependencies this build already made, where
# `cargo doc` would check every one of them again (minutes on a cold
# machine, issue 58).
#
# Cargo calls it as: WRAPPER RUSTC ARGS...
set -euo pipefail
clippy-driver "$@"
shift
is_lib=0 crate="" prev=""
for arg in "$@"; do
  case "$prev:$arg" in
    --crate-name:*) crate=$arg ;;
    --crate-type:lib) is_lib=1 ;;
  esac
  [ "$arg" = --test ] && exit 0
  prev=$arg
done
[ "$crate" = hostkeyctl ] && [ "$is_lib" = 1 ] || exit 0
# rustc's arguments rustdoc does not take, or that would write where the
# build writes: what to emit, where, and codegen for a binary.
args=()
out=target
all=("$@")
for ((i = 0; i < ${#all[@]}; i++)); do
  arg=${all[i]}
  case "$arg" in
    --out-dir) out=${all[i + 1]}; i=$((i + 1)) ;;
    -C | --emit | --json) i=$((i + 1)) ;;
    --emit=* | --json=* | -C*) ;;
    *) args+=("$arg") ;;
  esac
done
doc="$out/../doc-check"
mkdir -p "$doc"
rustdoc "${args[@]}" -o "$doc" --document-private-items -D rustdoc::broken_intra_doc_links \
  -A rustdoc::private_intra_doc_links -A rustdoc::invalid_html_tags
