#!/usr/bin/env bash
# Every figure of issue 31 in one run, back to back on one machine: each script times ours beside
# its yardstick (raw write/read of the same bytes, the bare kernel, the plain gcsfs transfer, the
# peers) in the same minutes, rounds interleaved. docs/benchmarks.md keeps what it printed.
#
#   bash benchmarks/issue31.sh OUT [BEFORE]
#
# OUT: a folder for the reports (*.md) and the raw rows (*.json). BEFORE: optional checkout of an
# earlier commit (git worktree add DIR COMMIT), measured beside ours at kernel start. Needs the
# test venv (bash scripts/test.sh), about 12 GB free on /var/tmp and 3 GB on /dev/shm; 23
# minutes on 2 cores (2026-12-04), 2 more since the --fixed-cost run. Run it on a quiet machine:
# other work on the cores moves every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$1"
before="${2:-}"
mkdir -p "$out"
py=.venv/bin/python
run() {  # run NAME COMMAND...: stdout to OUT/NAME.md, the load average before and after beside it
  local name="$1"
  shift
  echo "== $name: $* (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S) UTC)" >&2
  "$@" >"$out/$name.md"
  echo "   done $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
}
shm=/dev/shm/gkeresume-bench
mkdir -p "$shm" /var/tmp/gkeresume-bench
trap 'rm -rf "$shm" /var/tmp/gkeresume-bench' EXIT

# item 1: kernel start with and without the extension (and, given, before)
run kernel_start $py benchmarks/kernel_start.py --rounds 9 --out "$out/kernel_start.json" \
    ${before:+--before "$before"}
# item 4: the per-byte cost of new content beside a raw copy, tmpfs then disk
run blob_write_tmpfs $py benchmarks/blob_write.py --dir "$shm/bw" --mib 1024 --rounds 9
run blob_write_disk $py benchmarks/blob_write.py --dir /var/tmp/gkeresume-bench/bw --mib 1024 --rounds 5
# items 2 and 5: the pause's fixed cost, the per-byte pause and the resume through the server
run server $py benchmarks/server.py --gb 1.5 --dirs /var/tmp/gkeresume-bench,"$shm" \
    --out "$out/server.json"
# item 2 again: the small pause alone, back to back (nothing of a big round's after-effects)
run server_fixed_cost $py benchmarks/server.py --fixed-cost --rounds 7 \
    --dirs /var/tmp/gkeresume-bench,"$shm" --out "$out/server_fixed_cost.json"
# item 5: checkpoint and resume at 1.5 GB against raw write/copy, dill, torch, the unchanged second
run core_1_5gb $py benchmarks/core.py --gb 1.5 --dirs /var/tmp/gkeresume-bench,"$shm" --repeat 2 \
    --cases ours_save,ours_load,raw_write,raw_copy,raw_read,raw_read_fresh,ours_save_tensors,dill_save_no_opt,dill_load_no_opt,torch_save,torch_load \
    --out "$out/core_1_5gb.json"
# item 5: 5 GB (issue 23's session) against raw write/read and safetensors + pickle; then the
# same with both cores busy (two other processes spinning)
run core_5gb $py benchmarks/core.py --gb 5 --session issue23 --dirs /var/tmp/gkeresume-bench --repeat 2 \
    --cases ours_save,ours_load,raw_write,raw_read,raw_read_fresh,ours_save_tensors,st_pickle_save,st_pickle_load \
    --out "$out/core_5gb.json"
run core_5gb_busy $py benchmarks/core.py --gb 5 --session issue23 --dirs /var/tmp/gkeresume-bench --repeat 2 \
    --busy 2 --cases ours_save,ours_load,st_pickle_save,st_pickle_load --out "$out/core_5gb_busy.json"
# item 3: gs:// against a plain parallel gcsfs upload/download, client and emulator CPU per GB
run gcs $py benchmarks/gcs.py --shape tensors,core --gb 0.5 --rounds 5
echo "reports in $out" >&2
