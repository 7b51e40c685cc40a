#!/usr/bin/env bash
# Renders TensorBoard's scalars dashboard for a run folder to a PNG, headless.
#
#   tools/tb_screenshot.sh runs/default tb_scalars.png [plugin]
#
# Starts TensorBoard on 127.0.0.1 (a free port), loads the page in Debian's
# chromium (installed with apt-get when missing and we are root), waits for the
# charts, writes the screenshot, stops TensorBoard. plugin: scalars (default),
# images, text, hparams, ...
set -euo pipefail
cd "$(dirname "$0")/.."
logdir=${1:?usage: tools/tb_screenshot.sh LOGDIR OUT.png [plugin]}
out=${2:?usage: tools/tb_screenshot.sh LOGDIR OUT.png [plugin]}
plugin=${3:-scalars}
if [ $# -gt 3 ] || [ -d "$out" ]; then echo "usage: tools/tb_screenshot.sh LOGDIR OUT.png [plugin]" >&2; exit 2; fi
python=${PYTHON:-.venv/bin/python}

if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Debian's chromium" >&2
    apt-get install -y -q chromium >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  else
    echo "tb_screenshot: needs chromium (sudo apt-get install chromium)" >&2; exit 1
  fi
fi

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tb_log=$(mktemp)
"$python" -m tensorboard.main --logdir "$logdir" --host 127.0.0.1 --port "$port" \
  --load_fast=false >"$tb_log" 2>&1 &
tb_pid=$!
profile=$(mktemp -d)
trap 'kill $tb_pid 2>/dev/null || true; rm -rf "$profile" "$tb_log"' EXIT

# Ready once the scalars plugin answers with at least one run.
for _ in $(seq 120); do
  if curl -sf "http://127.0.0.1:$port/data/plugin/scalars/tags" | grep -q '"'; then break; fi
  kill -0 $tb_pid 2>/dev/null || { cat "$tb_log" >&2; exit 1; }
  sleep 0.5
done

# The flags keep chromium off the network this machine does not have.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$profile" --window-size=1600,1200 \
  --virtual-time-budget=15000 --screenshot="$(realpath -m "$out")" \
  "http://127.0.0.1:$port/#$plugin" 2>/dev/null
test -s "$out"
echo "wrote $out ($plugin dashboard of $logdir)"
