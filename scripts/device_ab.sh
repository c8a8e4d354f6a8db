#!/usr/bin/env bash
# One call on the lent GPU machine for what a session without device time left unmeasured: the GPU
# tests of the new kernel paths, then same-run A/B rounds of the tuning knobs against the shipped
# configs, then the DRAM bytes the prefill GEMMs read. Runs from the bundle scripts/device_bundle
# makes (carry .device); writes every log under $OUT (or ./device-ab-out) and prints a summary last.
#
#   bash scripts/device_bundle                      # here
#   bash scripts/device_ab.sh [tests|walk|pingpong|multicast|pregather|ncu]...   # there (all when none is named)
#
# Two decode steps run only when named:
#   stages     MXFP4 gpt-oss-120b M = 1 / 4 / 16 on 8-token swap-AB tiles of 4 x 2 warps at 2 / 3 / 4
#              stages (the shipped DB's tiles take 2), two rounds.
#   templates  a template copy against the binaries' own templates: the swap-AB GPU tests on the copy,
#              then two rounds of the decode cells of MXFP4, int4 and fp8 swap-AB tiles. Name the copy
#              with AB_TEMPLATES (carried along), e.g. for a patch of docs/experiments/:
#                mkdir -p .device/ab && git archive HEAD templates | tar -x -C .device/ab
#                git apply --directory=.device/ab docs/experiments/NAME.patch   # here
#                AB_TEMPLATES=.device/ab/templates bash scripts/device_ab.sh templates   # there
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-device-ab-out}
mkdir -p "$out"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-/tmp/moejit-ab-cache}
bin=.device
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(tests walk pingpong multicast pregather ncu)
summary=()
rows() { grep -E "^(Mixtral|Qwen3|gpt-oss|DeepSeek)" "$1" | awk '{printf "%s M=%s %s us %s\n", $1, $5, $6, $8}'; }
# Same-run A/B of the bench flag --NAME at the given token counts: two rounds, each without then with it.
ab_rounds() {
  local name=$1 tokens=$2 r flag f
  for r in 1 2; do
    for flag in "" "--$name"; do
      f="$out/${name}_${r}${flag:+_on}.txt"
      timeout 150 $bin/moejit_bench --only moe --tokens "$tokens" $flag > "$f" 2>&1
      summary+=("== round $r ${flag:-(config as shipped)}" "$(rows "$f")")
    done
  done
}

for step in "${steps[@]}"; do
  case $step in
    tests)  # correctness first: ping-pong and multicast alone (a hang ends at its own time limit), then the walks
      timeout 150 $bin/moejit_gpu_tests -tc='*ping-pong*' > "$out/tests_pingpong.txt" 2>&1
      summary+=("ping-pong tests rc=$?: $(grep -E 'test cases' "$out/tests_pingpong.txt" | tail -1)")
      timeout 150 $bin/moejit_gpu_tests -tc='*multicast*' > "$out/tests_multicast.txt" 2>&1
      summary+=("multicast tests rc=$?: $(grep -E 'test cases' "$out/tests_multicast.txt" | tail -1)")
      timeout 400 $bin/moejit_gpu_tests -tc='*wgmma kernel equals*,*DTYPE rows*,*quant: every tile*' > "$out/tests.txt" 2>&1
      summary+=("tests rc=$?: $(grep -E 'test cases' "$out/tests.txt" | tail -1)")
      ;;
    walk)  # rows per column sweep of the grouped walk; 0 = the default (8), first and last
      for w in 0 12 4 16 32 0; do
        timeout 150 $bin/moejit_bench --only moe --tokens 1024,4096,8192 --walk-rows $w > "$out/walk_$w.txt" 2>&1
        summary+=("== --walk-rows $w" "$(rows "$out/walk_$w.txt")")
      done
      ;;
    pingpong)  # the buckets on 64-row persistent tiles, without and with ping-pong groups
      ab_rounds pingpong 16,128,1024,4096
      ;;
    multicast)  # prefill buckets (persistent gated GEMM1s), without and with multicast
      ab_rounds multicast 1024,4096,8192
      ;;
    pregather)  # prefill buckets, GEMM1 reading X gathered beforehand on every persistent GEMM1
      ab_rounds pregather 1024,2048,4096,8192
      ;;
    ncu)  # the two GEMMs' DRAM bytes and L2 -> SM sectors: the default walk, 12 rows per sweep, multicast
      for v in "--walk-rows 0" "--walk-rows 12" "--multicast"; do
        for s in "Mixtral-8x7B 1024" "gpt-oss-120b 8192"; do
          set -- $s
          f="$out/ncu_${1}_${2}_$(echo $v | tr -d ' -').txt"
          timeout 60 ncu --clock-control none -k regex:moe_gemm -c 2 \
            --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sectors_srcunit_tex_op_read.sum \
            $bin/moejit_bench --only moe --shapes "$1" --tokens "$2" --reps 1 $v > "$f" 2>&1
          summary+=("ncu $v $1 M=$2: $(grep -E 'dram__bytes_read|duration|sectors' "$f" | awk '{printf "%s %s %s; ", $1, $2, $3}')")
        done
      done
      ;;
    stages)
      for r in 1 2; do
        for t in 4x2x2 4x2x3 4x2x4; do
          f="$out/stages_${t}_$r.txt"
          timeout 150 $bin/moejit_bench --only moe --quant mxfp4_packed --shapes gpt-oss-120b --tokens 1,4,16 \
            --swap-ab $t --block-m 8 > "$f" 2>&1
          summary+=("== round $r --swap-ab $t --block-m 8" "$(rows "$f")")
        done
      done
      ;;
    templates)
      if [ ! -d "${AB_TEMPLATES:-}" ]; then echo "device_ab: templates needs AB_TEMPLATES, a template directory"; exit 2; fi
      ab_dir=$(cd "$AB_TEMPLATES" && pwd)
      MOEJIT_TEMPLATE_DIR=$ab_dir timeout 400 $bin/moejit_gpu_tests \
        -tc='*swap-AB kernel equals*,*remote experts*,*scales above 2*,*quant: every format*' > "$out/templates_tests.txt" 2>&1
      summary+=("tests on $ab_dir rc=$?: $(grep -E 'test cases' "$out/templates_tests.txt" | tail -1)")
      for r in 1 2; do
        for which in own copy; do
          f="$out/templates_${which}_$r.txt"
          dir=""; [ $which = copy ] && dir=$ab_dir
          for cell in "mxfp4_packed gpt-oss-120b 1,4,16" "int4_group Qwen3-30B-A3B 4,16" "fp8_block DeepSeek-V3-TP8 16"; do
            set -- $cell
            MOEJIT_TEMPLATE_DIR=$dir timeout 150 $bin/moejit_bench --only moe --quant "$1" --shapes "$2" --tokens "$3"
          done > "$f" 2>&1
          summary+=("== round $r templates: $which" "$(rows "$f")")
        done
      done
      ;;
    *) echo "device_ab: unknown step $step (tests, walk, pingpong, multicast, pregather, ncu, stages, templates)"; exit 2 ;;
  esac
done
printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
