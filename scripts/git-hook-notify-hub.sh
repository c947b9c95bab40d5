#!/bin/sh
# A post-receive hook for a bare Git repository that a Flotilla hub
# follows: each push calls the hub's webhook, so the hub fetches the new
# commit at once instead of at its next poll. `make demo` installs it in
# .demo/fleet.git; any server-side repository can use it.
#
# It reads its settings from the repository's config:
#   git config flotilla.webhookUrl https://HUB:6443/hooks/git/NAMESPACE/NAME
#   git config flotilla.webhookTokenFile FILE  # holds the "token" of the Secret in the
#                                              # GitSource's spec.webhookSecretRef
#   git config flotilla.webhookCAFile FILE     # optional: the hub's CA (DATA_DIR/pki/ca.crt)
#
# The call is signed as GitHub signs its own (X-Hub-Signature-256: the
# HMAC-SHA256 of the body under the token), which is what the hub checks.
# A failed call never fails the push (the commit is in the repository
# already); the hook says why and the hub still finds the commit when it
# next polls. openssl computes the signature; the token is on its command
# line while it runs, so keep the hook on a machine whose users may see it.
set -u

url=$(git config flotilla.webhookUrl) || exit 0
say() { echo "flotilla: $*" >&2; }
tokenfile=$(git config flotilla.webhookTokenFile) || { say "flotilla.webhookTokenFile is not set: the hub was not told of this push"; exit 0; }
cafile=$(git config flotilla.webhookCAFile) || cafile=
if ! token=$(cat "$tokenfile"); then
  say "cannot read $tokenfile: the hub was not told of this push"
  exit 0
fi
for tool in openssl curl; do
  command -v "$tool" >/dev/null 2>&1 || { say "$tool is not installed: the hub was not told of this push"; exit 0; }
done
set --
if [ -n "$cafile" ]; then set -- --cacert "$cafile"; fi

# One call per updated ref, each with GitHub's push fields (the hub reads
# none of them: it asks the repository itself what the ref points to).
while read -r old new ref; do
  body=$(printf '{"ref":"%s","before":"%s","after":"%s"}' "$ref" "$old" "$new")
  sig=$(printf '%s' "$body" | openssl dgst -sha256 -hmac "$token" | sed 's/^.*= *//')
  if answer=$(curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$@" -X POST \
      -H 'Content-Type: application/json' -H 'X-GitHub-Event: push' -H "X-Hub-Signature-256: sha256=$sig" \
      --data-binary "$body" "$url" 2>&1) && [ "$answer" = 202 ]; then
    say "the hub fetches $ref now ($url)"
  else
    say "the hub did not take the webhook for $ref ($url: $answer); it finds the commit at its next poll"
  fi
done
exit 0
