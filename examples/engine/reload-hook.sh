#!/bin/sh
# reload-hook.sh - a wsync-watch hook that points an SGLang engine at the
# checkpoint directory of each new version, through its reload endpoint.
#
#   wsync-watch -m policy -o /srv/ckpt/policy --format safetensors \
#       --cast '*_proj.weight=f8e4m3:block128' -x examples/engine/reload-hook.sh
#
# wsync-watch runs it with WSYNC_PATH set to the version's own directory
# (/srv/ckpt/policy.v12, never swapped under the engine) and WSYNC_VERSION to
# its number. It POSTs {"model_path": WSYNC_PATH, "weight_version": "12"} to
# SGLang's /update_weights_from_disk (ENGINE_URL; default: SGLang's default
# port), the fields of SGLang's UpdateWeightFromDiskReqInput
# (https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/managers/io_struct.py;
# the endpoint in https://docs.sglang.io/advanced_features/sglang_for_rl.html),
# weight_version a string as SGLang declares it. The JSON is built by jq, so
# any path is escaped. SGLang answers {"success": true|false, "message": ...};
# an HTTP error or success false is this hook's failure (exit 1, the engine's
# message on stderr), which wsync-watch reports to the hub as a failed update.
set -eu
url=${ENGINE_URL:-http://127.0.0.1:30000/update_weights_from_disk}
body=$(jq -cn --arg path "$WSYNC_PATH" --arg version "$WSYNC_VERSION" \
	'{model_path: $path, weight_version: $version}')
if ! reply=$(curl --silent --show-error --max-time "${ENGINE_TIMEOUT:-600}" \
	-H 'Content-Type: application/json' -d "$body" -w '\n%{http_code}' "$url"); then
	echo "reload-hook: $url: no answer from the engine" >&2
	exit 1
fi
code=$(printf '%s\n' "$reply" | tail -n 1)
answer=$(printf '%s\n' "$reply" | sed '$d')
success=$(printf '%s' "$answer" | jq -r '.success' 2>/dev/null || echo "not JSON")
if [ "$code" != 200 ] || [ "$success" != true ]; then
	message=$(printf '%s' "$answer" | jq -r '.message // empty' 2>/dev/null ||
		printf '%s' "$answer")
	echo "reload-hook: the engine refused version $WSYNC_VERSION (HTTP $code): $message" >&2
	exit 1
fi
