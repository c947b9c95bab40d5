#!/usr/bin/env bash
# Installs, from Debian's packages, what the hub, the agents and the tests
# need on this machine, and starts containerd where it is not running.
# Safe to run again; does nothing that is already done.
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins iptables iproute2 conntrack docker-registry git ca-certificates procps curl gnupg)
# openssl signs the webhook calls of the demo's push hook (scripts/git-hook-notify-hub.sh).
pkgs+=(openssl)
# For tests that would otherwise skip: ssh-keygen (SSH-signed commits) and
# the package tests in packaging/ (lintian, rpm, and qemu-user-static to run
# the arm64 and armv7 binaries; they call qemu-*-static directly, so no
# binfmt registration is needed).
pkgs+=(openssh-client lintian rpm qemu-user-static)
# No kubectl is needed: the kubectl tests (hub/apiserver,
# hub/apiserver/openapi) build their own from the module proxy (test/kubectl:
# k8s.io/kubectl at the version go.mod pins; `make test` builds it once into
# bin/test), never the one in PATH. Debian's kubernetes-client is 1.20, too
# old for them anyway.
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "$(id -u)" != 0 ]; then
  [ ${#missing[@]} -eq 0 ] || echo "install-deps: not root; missing ${missing[*]} (tests that need them will skip)" >&2
  exit 0
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian's docker-registry package starts a registry on :5000 as a service;
# tests start their own on loopback ports, so the packaged one is left alone.

# The cosign CLI signs test images for registry/trust's tests (devices verify
# with Flotilla's own code, not with cosign). Debian has no package, so the Go
# toolchain builds it from the module proxy: several minutes on 2 cores
# (4m58s measured). Skipped when this version is already installed.
cosign_version=v2.6.5
if ! cosign version 2>/dev/null | grep -qE "GitVersion:[[:space:]]+${cosign_version}\$"; then
  gobin=$(command -v go || echo /usr/local/go/bin/go)
  echo "install-deps: building cosign ${cosign_version} (several minutes)"
  GOBIN=/usr/local/bin GOFLAGS=-buildvcs=false "$gobin" install "github.com/sigstore/cosign/v2/cmd/cosign@${cosign_version}"
fi

if ! [ -S /run/containerd/containerd.sock ] || ! ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
  echo "install-deps: starting containerd"
  mkdir -p /run/containerd /var/log/flotilla
  if command -v systemctl >/dev/null 2>&1 && systemctl is-system-running >/dev/null 2>&1; then
    systemctl start containerd
  else
    # containerd outlives this script: it must not keep the caller's other
    # open files (a lock held by `flock … install-deps.sh` would stay held
    # for as long as containerd runs).
    (
      for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && eval "exec $fd>&-"
      done
      exec nohup containerd >/var/log/flotilla/containerd.log 2>&1 </dev/null
    ) &
  fi
  for _ in $(seq 1 50); do
    ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 && break
    sleep 0.2
  done
fi
ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1 || { echo "install-deps: containerd did not start" >&2; exit 1; }
modprobe br_netfilter 2>/dev/null || true
