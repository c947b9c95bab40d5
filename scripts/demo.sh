#!/usr/bin/env bash
# make demo / make demo-down: a whole fleet on this machine.
#
#   - a hub on the embedded store, following a local Git repository;
#   - DEVICES devices, each its own network namespace on the bridge
#     flotdemo0 (10.99.0.0/24), each running flotilla-agent joined with a
#     token, in its own containerd namespace;
#   - a local registry (docker-registry) with the demo application's image,
#     built here from examples/app;
#   - examples/fleet committed to .demo/fleet.git, which the hub applies;
#     a push to it calls the hub's webhook (scripts/git-hook-notify-hub.sh),
#     signed with the token in .demo/webhook.token.
#
# Everything it makes lives under .demo/ or is named flotdemo*, and
# `make demo-down` removes all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# Everything can be renamed so that tests (test/e2e) run their own fleet
# beside a user's demo.
DEMO=${FLOTDEMO_DIR:-$ROOT/.demo}
PREFIX=${FLOTDEMO_PREFIX:-flotdemo}
BIN=${FLOTILLA_BIN:-$ROOT/bin}
DEVICES=${DEVICES:-3}
BRIDGE=${PREFIX}0
NET=${FLOTDEMO_NET:-10.99.0}
HUB_IP=$NET.1
HUB_URL=https://$HUB_IP:6443
# The registry listens on the bridge, where the devices' agents pull from.
REGISTRY=$HUB_IP:${FLOTDEMO_REGISTRY_PORT:-5055}
FLOTCTL="$BIN/flotctl --kubeconfig $DEMO/hub/admin.kubeconfig"

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\033[31merror: %s\033[0m\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "make demo needs root (network namespaces, containerd, iptables)"; }

stop_pidfile() {
  local f=$1
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  need_root
  log "stopping the demo"
  for i in $(seq 1 9); do
    if [ -f "$DEMO/dev$i.pid" ]; then
      stop_pidfile "$DEMO/dev$i.pid"
    fi
    if ip netns list 2>/dev/null | grep -qw "$PREFIX-dev$i"; then
      # The agent's cleanup removes its pods, their networks, its
      # containerd namespace and its iptables rules.
      nsenter --net="/run/netns/$PREFIX-dev$i" "$BIN/flotilla-agent" cleanup --pods --config= \
        --containerd-namespace "$PREFIX-dev$i" --data-dir "$DEMO/dev$i" --cni-conf-dir "$DEMO/dev$i/cni" \
        --log-dir "$DEMO/dev$i/logs" | sed 's/^/    /' || echo "    cleanup of dev$i reported errors (above)"
      ip netns delete "$PREFIX-dev$i" 2>/dev/null || true
    fi
    ip link delete "${PREFIX:0:4}v${i}h" 2>/dev/null || true
  done
  stop_pidfile "$DEMO/hub.pid"
  stop_pidfile "$DEMO/registry.pid"
  ip link delete "$BRIDGE" 2>/dev/null || true
  iptables -D FORWARD -i "$BRIDGE" -j ACCEPT 2>/dev/null || true
  iptables -D FORWARD -o "$BRIDGE" -j ACCEPT 2>/dev/null || true
  iptables -t nat -D POSTROUTING -s $NET.0/24 ! -o "$BRIDGE" -j MASQUERADE 2>/dev/null || true
  rm -rf "$DEMO"
  log "removed the demo (.demo/, namespaces flotdemo-*, bridge $BRIDGE)"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  for _ in $(seq 1 $((secs * 2))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "timed out after ${secs}s waiting for $what"
}

# The hub's own GitSource (flotilla-hub serve --source-name) and the
# Secret whose token signs webhooks to it.
SOURCE_NS=flotilla-system
SOURCE_NAME=default
WEBHOOK_SECRET=demo-webhook

# install_push_hook makes each push to .demo/fleet.git call the hub's
# webhook: the hub fetches at once instead of at its next poll.
install_push_hook() {
  log "making a push to $DEMO/fleet.git call the hub's webhook"
  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$DEMO/webhook.token")
  # The token goes into the Secret through stdin, never a command line.
  { printf 'apiVersion: v1\nkind: Secret\nmetadata: {name: %s, namespace: %s}\nstringData:\n  token: "' "$WEBHOOK_SECRET" "$SOURCE_NS"
    cat "$DEMO/webhook.token"; printf '"\n'; } | $FLOTCTL apply -f - >/dev/null
  cp "$DEMO/hub/pki/ca.crt" "$DEMO/hub-ca.crt"
  install -m 0755 scripts/git-hook-notify-hub.sh "$DEMO/fleet.git/hooks/post-receive"
  git -C "$DEMO/fleet.git" config flotilla.webhookUrl "$HUB_URL/hooks/git/$SOURCE_NS/$SOURCE_NAME"
  git -C "$DEMO/fleet.git" config flotilla.webhookTokenFile "$DEMO/webhook.token"
  git -C "$DEMO/fleet.git" config flotilla.webhookCAFile "$DEMO/hub-ca.crt"
}

up() {
  need_root
  [ -x "$BIN/flotilla-hub" ] && [ -x "$BIN/flotilla-agent" ] && [ -x "$BIN/flotctl" ] || die "run make build first (make demo does)"
  if [ -d "$DEMO" ]; then down; fi
  # A bridge or namespace of this name that $DEMO does not account for is
  # another fleet's: another checkout's demo, or a test run beside this
  # one. Taking it over would break that fleet.
  if ip link show "$BRIDGE" >/dev/null 2>&1 || ip netns list 2>/dev/null | grep -q "^$PREFIX-dev"; then
    die "bridge $BRIDGE or namespaces $PREFIX-dev* already exist, but not in $DEMO: another fleet with prefix $PREFIX runs on this machine. Stop it with its own 'make demo-down' (FLOTDEMO_DIR=<its dir> FLOTDEMO_PREFIX=$PREFIX scripts/demo.sh down), or pick another FLOTDEMO_PREFIX and FLOTDEMO_NET"
  fi
  mkdir -p "$DEMO"

  log "creating the devices' network: bridge $BRIDGE ($HUB_IP/24)"
  ip link add "$BRIDGE" type bridge
  ip addr add "$HUB_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw net.ipv4.ip_forward=1
  iptables -I FORWARD -i "$BRIDGE" -j ACCEPT
  iptables -I FORWARD -o "$BRIDGE" -j ACCEPT
  iptables -t nat -A POSTROUTING -s $NET.0/24 ! -o "$BRIDGE" -j MASQUERADE

  log "starting a local registry on $REGISTRY"
  mkdir -p "$DEMO/registry"
  cat >"$DEMO/registry/config.yml" <<EOT
version: 0.1
log: {level: error, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $DEMO/registry/data}}
http: {addr: $REGISTRY}
EOT
  docker-registry serve "$DEMO/registry/config.yml" >"$DEMO/registry.log" 2>&1 &
  echo $! >"$DEMO/registry.pid"
  wait_for 20 "the registry" curl -fsS "http://$REGISTRY/v2/"

  log "building the demo application image from examples/app"
  IMAGE=$(go run ./test/testimage/cmd/push-image -registry "$REGISTRY" -name demo/hello -source ./examples/app -ports 8080/tcp)
  echo "    $IMAGE"

  log "committing examples/fleet to a local Git repository"
  git init -q --bare -b main "$DEMO/fleet.git"
  git clone -q "$DEMO/fleet.git" "$DEMO/fleet" 2>/dev/null
  cp -r examples/fleet/. "$DEMO/fleet/"
  sed -i "s|image: IMAGE|image: $IMAGE|" "$DEMO/fleet/apps/hello.yaml"
  git -C "$DEMO/fleet" add -A
  git -C "$DEMO/fleet" -c user.name=demo -c user.email=demo@flotilla.invalid commit -qm "The shop fleet: hello app"
  git -C "$DEMO/fleet" push -q origin HEAD:main

  log "starting the hub at $HUB_URL, following $DEMO/fleet.git"
  # The webhook Secret is created once the hub answers; until then the
  # hub refuses webhooks and finds commits by polling.
  "$BIN/flotilla-hub" serve --config= --data-dir "$DEMO/hub" --listen "$HUB_IP:6443" --tls-san "$HUB_IP" \
    --source-url "file://$DEMO/fleet.git" --source-ref main --source-path apps --source-interval 5s \
    --source-webhook-secret "$WEBHOOK_SECRET" \
    >"$DEMO/hub.log" 2>&1 &
  echo $! >"$DEMO/hub.pid"
  wait_for 30 "the hub" $FLOTCTL get namespaces
  install_push_hook

  for i in $(seq 1 "$DEVICES"); do
    ns=$PREFIX-dev$i
    # One single-use token per device; the token's labels land on its Node.
    # Every device sits on one bridge, one network: one site (the zone).
    TOKEN_JSON=$("$BIN/flotilla-hub" token create --data-dir "$DEMO/hub" --ttl 1h --uses 1 \
      --labels "topology.kubernetes.io/zone=demo-shop,shelf=$i" -o json)
    TOKEN=$(echo "$TOKEN_JSON" | tr -d '\n' | sed -E 's/.*"token": *"([^"]+)".*/\1/')
    CAHASH=$(echo "$TOKEN_JSON" | tr -d '\n' | sed -E 's/.*"caHash": *"([^"]+)".*/\1/')
    log "device dev$i: network namespace $ns ($NET.$((10 + i))), joining with a token"
    ip netns add "$ns"
    ip link add "${PREFIX:0:4}v${i}h" type veth peer name eth0 netns "$ns"
    ip link set "${PREFIX:0:4}v${i}h" master "$BRIDGE" up
    ip -n "$ns" addr add "$NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" route add default via "$HUB_IP"
    mkdir -p "$DEMO/dev$i"
    # The demo registry speaks plain HTTP.
    cat >"$DEMO/dev$i/agent.yaml" <<EOT
registries:
  hosts:
    $REGISTRY: {plainHTTP: true}
EOT
    # nsenter joins only the device's network namespace: `ip netns exec`
    # would also give the agent a private mount namespace, hiding the pod
    # namespaces it bind-mounts from containerd.
    nsenter --net="/run/netns/$ns" "$BIN/flotilla-agent" run --config "$DEMO/dev$i/agent.yaml" \
      --hub "$HUB_URL" --token "$TOKEN" --ca-hash "$CAHASH" --node-name "dev$i" \
      --data-dir "$DEMO/dev$i" --containerd-namespace "$ns" --node-ip "$NET.$((10 + i))" \
      --cni-conf-dir "$DEMO/dev$i/cni" --log-dir "$DEMO/dev$i/logs" \
      --manifests-dir "$DEMO/dev$i/manifests" --trust-dir "$DEMO/dev$i/trust" \
      >"$DEMO/dev$i.log" 2>&1 &
    echo $! >"$DEMO/dev$i.pid"
  done

  log "waiting for the devices to be Ready"
  for i in $(seq 1 "$DEVICES"); do
    wait_for 90 "device dev$i" bash -c "$FLOTCTL get node dev$i -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -q True"
  done
  log "waiting for the hub to apply the commit and the pods to run"
  wait_for 60 "the GitSource to apply" bash -c "$FLOTCTL get deployment hello -n shop"
  $FLOTCTL rollout status deployment/hello -n shop --timeout 180s

  CLUSTER_IP=$($FLOTCTL get service hello -n shop -o jsonpath='{.spec.clusterIP}')
  log "asking the service from device dev1: curl http://$CLUSTER_IP/"
  wait_for 30 "the service to answer" ip netns exec $PREFIX-dev1 curl -fsS --max-time 2 "http://$CLUSTER_IP/"
  for _ in 1 2 3 4; do ip netns exec $PREFIX-dev1 curl -fsS --max-time 2 "http://$CLUSTER_IP/"; done

  log "the fleet"
  $FLOTCTL fleet status
  cat <<EOT

The fleet is running. Logs: .demo/hub.log, .demo/dev*.log.
  export FLOTILLA_KUBECONFIG=$DEMO/hub/admin.kubeconfig
  bin/flotctl get pods -A -o wide
  bin/flotctl describe deployment hello -n shop

Roll out a change through Git and watch it. The push tells the hub (a
hook calls its webhook); reconcile waits until the hub has applied the
commit, so that rollout status follows the new rollout, not the last one:
  cd .demo/fleet && sed -i 's/value: hello/value: bonjour/' apps/hello.yaml \\
    && git -c user.name=you -c user.email=you@example.com commit -qam "bonjour" && git push -q && cd ../..
  bin/flotctl reconcile source
  bin/flotctl rollout status deployment/hello -n shop
  ip netns exec $PREFIX-dev1 curl -s http://$CLUSTER_IP/

Remove everything: make demo-down
EOT
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
