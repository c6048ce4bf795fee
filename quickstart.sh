#!/usr/bin/env bash
# The quickstart: on a fresh Debian machine (as root), installs what is missing (containerd, runc,
# the CNI plugins, iptables, busybox-static, iproute2; kubectl if Debian has it), builds
# cloudcore, edgecore, keadm and the quickstart in release, then runs it: a cloud and two edge
# nodes on this machine with real pods (see tests/src/bin/quickstart.rs). Arguments go to the
# quickstart (--keep, --dir DIR). Its exit code is this script's.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" -ne 0 ]; then
  echo "quickstart.sh: run as root: it starts containerd, pods and their network" >&2
  exit 1
fi

need_apt=()
command -v containerd >/dev/null 2>&1 || need_apt+=(containerd)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need_apt+=(iptables)
[ -x /bin/busybox ] || need_apt+=(busybox-static)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v kubectl >/dev/null 2>&1 || need_apt+=(kubernetes-client)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing with apt-get: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # kubectl is optional (the quickstart prints the pods itself without it); the rest is required.
  if ! apt-get install -y -qq "${need_apt[@]}"; then
    required=()
    for p in "${need_apt[@]}"; do [ "$p" = kubernetes-client ] || required+=("$p"); done
    apt-get install -y -qq "${required[@]}"
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "quickstart.sh: no cargo: install a Rust toolchain (1.89+) first" >&2
  exit 1
fi

# QUICKSTART_PROFILE=debug reuses what `cargo test` built (CI does); release is the default.
profile="${QUICKSTART_PROFILE:-release}"
case "$profile" in
  release) flags=(--release) ;;
  debug) flags=() ;;
  *) echo "quickstart.sh: QUICKSTART_PROFILE must be release or debug, not $profile" >&2; exit 1 ;;
esac
echo "==> building cloudcore, edgecore, keadm and the quickstart ($profile; the first build takes a while)"
cargo build "${flags[@]}" \
  -p cloudcore --bin cloudcore \
  -p edgecore --bin edgecore \
  -p keadm --bin keadm \
  -p e2e --bin quickstart

exec "${CARGO_TARGET_DIR:-target}/$profile/quickstart" "$@"
