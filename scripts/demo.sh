#!/usr/bin/env bash
# make demo / make demo-down: a hub on this machine, its state under .demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DEMO=$ROOT/.demo
BIN=$ROOT/bin
HUB_ADDR=${FLOTILLA_DEMO_LISTEN:-127.0.0.1:6443}

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

stop_pidfile() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  log "stopping the demo"
  stop_pidfile "$DEMO/hub.pid"
  rm -rf "$DEMO"
  log "removed $DEMO"
}

up() {
  mkdir -p "$DEMO"
  stop_pidfile "$DEMO/hub.pid"
  log "starting the hub on $HUB_ADDR (embedded store in $DEMO/hub)"
  "$BIN/flotilla-hub" serve --config= --data-dir "$DEMO/hub" --listen "$HUB_ADDR" >"$DEMO/hub.log" 2>&1 &
  echo $! >"$DEMO/hub.pid"
  export KUBECONFIG=$DEMO/hub/admin.kubeconfig
  for _ in $(seq 1 100); do
    "$BIN/flotctl" --kubeconfig "$KUBECONFIG" get namespaces >/dev/null 2>&1 && break
    sleep 0.2
  done
  "$BIN/flotctl" --kubeconfig "$KUBECONFIG" get namespaces >/dev/null || { cat "$DEMO/hub.log"; exit 1; }
  log "the hub answers; what it serves:"
  "$BIN/flotctl" --kubeconfig "$KUBECONFIG" version || true
  "$BIN/flotctl" --kubeconfig "$KUBECONFIG" get namespaces
  cat <<EOT

The hub is running (log: $DEMO/hub.log). Its admin kubeconfig:

  export FLOTILLA_KUBECONFIG=$KUBECONFIG

Try:
  bin/flotctl fleet status
  bin/flotctl get pods -A
  kubectl --kubeconfig $KUBECONFIG api-resources      (if kubectl is installed)

Stop everything with: make demo-down
EOT
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
