#!/bin/sh
# reload-hook.sh - a wsync-watch hook that points an inference engine at the
# checkpoint directory of each new version, through its HTTP reload endpoint.
#
#   wsync-watch -m policy -o /srv/ckpt/policy --format safetensors \
#       -x 'examples/engine/reload-hook.sh'
#
# wsync-watch runs it with WSYNC_PATH set to the version's own directory
# (/srv/ckpt/policy.v12, never swapped under the engine). ENGINE_URL is the
# engine's reload endpoint; the default is SGLang's update_weights_from_disk
# on its default port (vLLM's is served by its own admin route). A non-zero
# exit, an HTTP error included, is reported to the hub as a failed update.
set -eu
url=${ENGINE_URL:-http://127.0.0.1:30000/update_weights_from_disk}
body=$(printf '{"model_path": "%s", "version": %s}' "$WSYNC_PATH" "$WSYNC_VERSION")
exec curl --fail --silent --show-error --max-time "${ENGINE_TIMEOUT:-600}" \
	-H 'Content-Type: application/json' -d "$body" "$url"
