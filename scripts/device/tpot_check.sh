#!/usr/bin/env bash
# Issue 33 on the GPU machine: TPOT-aware scheduling measured from the client side over HTTP
# (rill-server + rill-loadtest) on the Llama-2-7B shape, plus the no-loss checks. rill-server and
# rill-loadtest (gRPC: built here with CMAKE_CUDA_ARCHITECTURES=90a and carried with their
# libraries, as for loadtest_check.sh); rill-make-model, rill-serve-bench and rill-bench from the
# same carry or build_here.sh:
#   scripts/device/tpot_check.sh BIN_DIR LIB_DIR SECTION...
# Each section fits one device call (about 4-7 minutes, the random models made once):
#   mix     the issue's experiment with the server's defaults: 32 long-lived streams (4 + 1020
#           StreamingLLM caches, 1,024-token prompts) decoding while 2,048-token prompts arrive at
#           2/s (32 tokens each); then the same through the engine alone (rill-serve-bench, S3's
#           command with the defaults) for the engine-side view.
#   gap     the client-side gap: the same experiment with today's fixed budgets (--tpot-aware
#           false, 224 and 8192 tokens a step), token-id prompts and, at 224, chat prompts of text
#           (tokenized on the server's HTTP threads); each report sets the client's gaps beside
#           the server's own ITL histogram (p50 / p99) for the same window.
#   sweep   goodput at TPOT <= 25 ms and TTFT <= 500 ms (the requests send them as targets) over
#           arrival rate x prompt length, the adaptive planner against fixed budgets of 512, 2,048
#           and 8,192 tokens; 8 s of arrivals a point, 128-token answers; the 7B shape with 16,384
#           positions (Llama-2-7B has 4,096, too few for the 8,192-token prompts).
#   noloss  offline throughput on the 8B shape (1,000 x 256/256 at once, S2's command) and batch-1
#           TPOT on the 7B shape (C1's rill-bench, and one 512 + 512 request through the engine),
#           each with --tpot-aware true and false in the same session; every step of the 8B runs
#           (composition, device time, the cost model's prediction) in tpot_noloss_steps_*.txt.gz.
# Every run's rill-loadtest report and every server log go to /tmp/tpot on the machine (more than
# a call brings back); what comes back in $OUT: the section's log tpot_<section>.txt, the tables
# tpot_<section>.md (scripts/device/tpot_summary.py over the reports), the HTML report of the
# default run (mix) and the sweep's chart tpot_sweep.svg.
set -u
bin=$1 lib=$2
shift 2
scratch=/tmp/tpot
mkdir -p "$scratch"
export LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
make7b() { [ -d /tmp/llama2-7b ] || "$bin/rill-make-model" --config llama2-7b --out /tmp/llama2-7b >/dev/null; }
make8b() { [ -d /tmp/llama3-8b ] || "$bin/rill-make-model" --config llama3-8b --out /tmp/llama3-8b >/dev/null; }
# The sweep's 8,192-token prompts need more than Llama-2-7B's 4,096 positions: the same shape with
# 16,384 (random weights either way; RoPE's range changes nothing in a step's cost).
make7b16k() {
  [ -d /tmp/llama2-7b-16k ] && return
  cat >/tmp/llama2-7b-16k.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 11008,
 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
 "max_position_embeddings": 16384, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "hidden_act": "silu",
 "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float16"}
JSON
  "$bin/rill-make-model" --config /tmp/llama2-7b-16k.json --out /tmp/llama2-7b-16k >/dev/null
}
model=/tmp/llama2-7b

pid="" port=""
serve() {  # serve NAME FLAGS...: starts rill-server on $model (the 7B shape); sets pid and port
  local name=$1
  shift
  "$bin/rill-server" --model "$model" --device cuda --host 127.0.0.1 --http-port 0 --grpc-port 0 \
    --log-level info --access-log false "$@" >"$scratch/server_$name.txt" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 240); do
    # The "listening" event's port (at --log-level info the configuration, "http_port":0, comes
    # first in the same file).
    port=$(grep -a '"event":"listening"' "$scratch/server_$name.txt" 2>/dev/null |
      grep -o '"http_port":[0-9]*' | head -1 | cut -d: -f2)
    [ -n "$port" ] && grep -q '"event":"ready"' "$scratch/server_$name.txt" && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  echo "$name: server did not start"
  tail -20 "$scratch/server_$name.txt"
  kill $pid 2>/dev/null
  return 1
}
unserve() {
  kill -TERM $pid
  wait $pid
  grep -a "step cost" "$scratch/server_$1.txt" | tail -1
}
load() {  # load NAME ARGS...: one rill-loadtest run against the server on $port
  local name=$1
  shift
  echo "--- $name: rill-loadtest $*"
  timeout 240 "$bin/rill-loadtest" --http 127.0.0.1:$port --out "$scratch/$name" --html "$scratch/$name.html" \
    "$@" >"$scratch/$name.console.txt" 2>&1
  echo "rc=$?"
  grep -aE "ITL mean / p50 / p99|ITL p99 / steady|All gaps|ITL p50 / p99 \(ms, histogram\)|Request goodput|Failed requests" \
    "$scratch/$name.console.txt"
  grep -aA2 "Time to First Token" "$scratch/$name.console.txt" | tail -2
}
summary() {  # summary SECTION: the section's tables from the reports
  python3 scripts/device/tpot_summary.py "$scratch" "$1" --svg "$OUT/tpot_sweep.svg" | tee "$OUT/tpot_$1.md"
}
# The issue's experiment: 32 streams, then 2,048-token prompts at 2/s for 10 s.
MIX=(--warmup-requests 8 --streams 32 --stream-prompt-len 1024 --stream-sink 4 --stream-window 1020
  --stream-settle 5 --rate 2 --duration 10 --num-requests 100000 --input-len 2048 --output-len 32)

for section in "$@"; do
  t=$SECONDS
  case $section in
    mix)
      make7b
      { serve defaults && load mix_defaults "${MIX[@]}" && unserve defaults
        echo "--- engine alone (rill-serve-bench, S3's command with the defaults)"
        SPDLOG_LEVEL=trace timeout 240 "$bin/rill-serve-bench" --model /tmp/llama2-7b --decode-streams 32 \
          --decode-prompt-len 1024 --decode-window 1020 --num-requests 16 --input-len 2048 --output-len 32 \
          --rate 2 --max-num-seqs 64 --max-num-batched-tokens 8192 >"$scratch/mix_engine.txt" 2>&1
        grep -aE "decode streams|ITL-|TTFT|p99 ITL|step cost" "$scratch/mix_engine.txt" | grep -av "\] step: "
        # Every step's composition, device time, prediction and launch host time.
        grep -a "\] step: " "$scratch/mix_engine.txt" | gzip >"$OUT/tpot_mix_steps.txt.gz"
      } 2>&1 | tee "$OUT/tpot_mix.txt"
      cp "$scratch/mix_defaults.html" "$OUT/tpot_mix_defaults.html" 2>/dev/null
      summary mix ;;
    gap)
      make7b
      { serve fixed224 --tpot-aware false --max-num-batched-tokens 224 &&
          load gap_224_ids "${MIX[@]}" && load gap_224_chat "${MIX[@]}" --chat && unserve fixed224
        serve fixed8192 --tpot-aware false && load gap_8192_ids "${MIX[@]}" && unserve fixed8192
      } 2>&1 | tee "$OUT/tpot_gap.txt"
      summary gap ;;
    sweep)
      make7b16k
      model=/tmp/llama2-7b-16k
      # (rate, prompt length): from one 8,192-token prompt a second to eight of 512 and of 2,048.
      points=("1 8192" "2 4096" "4 2048" "8 512" "8 2048")
      [ -n "${SWEEP_POINTS:-}" ] && IFS=, read -r -a points <<<"$SWEEP_POINTS"  # e.g. "1 8192,2 4096"
      configs=(adaptive fixed512 fixed2048 fixed8192)
      [ -n "${SWEEP_CONFIGS:-}" ] && IFS=, read -r -a configs <<<"$SWEEP_CONFIGS"  # e.g. "adaptive,fixed8192"
      for config in "${configs[@]}"; do
        case $config in
          adaptive) flags=() ;;
          *) flags=(--tpot-aware false --max-num-batched-tokens "${config#fixed}") ;;
        esac
        serve "$config" "${flags[@]}" || continue
        for p in "${points[@]}"; do
          read -r rate len <<<"$p"
          load "sweep_${config}_r${rate}_l${len}" --warmup-requests 4 --rate "$rate" --duration 8 \
            --num-requests 100000 --input-len "$len" --output-len 128 --slo ttft:500,tpot:25 \
            --targets ttft:500,tpot:25
        done
        unserve "$config"
      done 2>&1 | tee "$OUT/tpot_sweep.txt"
      summary sweep ;;
    noloss)
      make7b
      make8b
      {
        for aware in true false; do
          echo "--- 8B offline, 1,000 x 256 + 256, --tpot-aware $aware"
          SPDLOG_LEVEL=trace timeout 300 "$bin/rill-serve-bench" --model /tmp/llama3-8b --dtype bfloat16 \
            --num-requests 1000 --input-len 256 --output-len 256 --max-num-seqs 256 \
            --max-num-batched-tokens 8192 --tpot-aware $aware >"$scratch/noloss_8b_$aware.txt" 2>&1
          grep -aE "duration|TTFT|TPOT|ITL|step cost" "$scratch/noloss_8b_$aware.txt"
          # Every step's composition, device time and prediction (rill-serve-bench's trace log).
          grep -a "\] step: " "$scratch/noloss_8b_$aware.txt" | gzip >"$OUT/tpot_noloss_steps_$aware.txt.gz"
        done
        echo "--- 7B batch 1, 515 cached (C1)"
        timeout 200 "$bin/rill-bench" --model /tmp/llama2-7b --batch 1 --context 512 --prefill 0 --max-batch 8 \
          --steps 128 2>&1 | tail -4
        for aware in true false; do
          echo "--- 7B one request of 512 + 512 through the engine, --tpot-aware $aware"
          timeout 200 "$bin/rill-serve-bench" --model /tmp/llama2-7b --num-requests 1 --input-len 512 \
            --output-len 512 --max-num-seqs 8 --tpot-aware $aware 2>&1 | grep -aE "TPOT|ITL"
        done
      } 2>&1 | tee "$OUT/tpot_noloss.txt" ;;
    *) echo "unknown section $section" ;;
  esac
  echo "=== $section took $((SECONDS - t)) s"
done
