#!/usr/bin/env bash
# The checks that need the lent hardware (an NVIDIA GPU; a Xeon with AMX),
# in two halves, because the lent machine has no Go:
#
#   scripts/devicecheck.sh build        here: the test binaries (gpu, root
#                                       package, internal/kernel) and the CLI,
#                                       static where possible, into devicebin/
#   scripts/devicecheck.sh run [DIR]    there: every check; the report is
#                                       DIR/report.md (default $OUT), raw
#                                       output in DIR/devicecheck.log and
#                                       DIR/steps/
#   scripts/devicecheck.sh --dry-run    here: build, then run the parts that
#                                       need no GPU with tiny sizes (the GPU
#                                       parts must report "no CUDA device");
#                                       report in devicebin/dry/report.md
#
# The device tool's call (README, "Checking on a lent GPU machine"):
#   command: bash scripts/devicecheck.sh run
#   carry:   ["devicebin"]
# after `bash scripts/devicecheck.sh build` here.
#
# The run always reports, within the tool's 10 minutes per command: the
# steps share a budget of FLASHATTN_DEVICECHECK_BUDGET seconds (450), each
# limited by its own limit and by what remains (a step that would get
# under 10 s is SKIPPED); report.md is rewritten after every step (and
# names the step in progress), so a killed run keeps what it had. A step
# runs under `set -o pipefail`: it FAILS when any command of a pipeline
# fails, not only the last. FLASHATTN_DEVICECHECK_FAIL=all makes every
# step's command fail (a failing command piped into tail, then exit), to
# test that reporting: CI's dry run checks that no step then reads ok.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/devicebin

build() {
	mkdir -p "$bin"
	local ld=(-trimpath -ldflags=-s\ -w)
	# CGO_ENABLED=0 everywhere: package gpu opens libcuda with purego,
	# whose cgo-free loader needs only the system's dynamic linker (the
	# binaries that import it are dynamically linked, the others static).
	export CGO_ENABLED=0
	go test -c "${ld[@]}" -o "$bin/gpu.test" ./gpu &&
		go test -c "${ld[@]}" -o "$bin/flashattn.test" . &&
		go test -c "${ld[@]}" -o "$bin/kernel.test" ./internal/kernel &&
		go build "${ld[@]}" -o "$bin/flashattn" ./cmd/flashattn || return 1
	git rev-parse --short HEAD >"$bin/commit" 2>/dev/null || echo unknown >"$bin/commit"
	du -sh "$bin" | awk '{print "devicecheck: built devicebin/ (" $1 ")"}'
}

# render [NOTE]: writes $dir/report.md from the steps so far (the
# summary table, then each step's section), NOTE as the last table row;
# written to a temporary file and renamed, so it is always whole.
render() {
	{
		printf '# flashattn device check\n\n%s, commit %s, %s, budget %d s, %d s used\n\n' "$started" "$(cat "$bin/commit")" "$where" "$budget" $((SECONDS - t_start))
		printf '| step | status | time |\n|---|---|---|\n'
		[ ${#summary[@]} -gt 0 ] && printf '%s\n' "${summary[@]}"
		[ -n "${1:-}" ] && printf '| %s |\n' "$1"
		cat "$body"
	} >"$dir/report.md.tmp" && mv "$dir/report.md.tmp" "$dir/report.md"
}

# step NAME LIMIT CMD...: runs CMD with bash -o pipefail, limited to LIMIT
# seconds or what remains of the budget, whichever is less; its output goes
# to $dir/steps/ and the log, its status and output's tail to the report.
step() {
	local name=$1 limit=$2
	shift 2
	local cmd="$*" t0=$SECONDS
	local left=$((budget - (SECONDS - t_start)))
	nstep=$((nstep + 1))
	local out
	out=$dir/steps/$(printf '%02d' $nstep)-$(tr -c 'A-Za-z0-9\n' - <<<"$name" | tr -s -).txt
	if [ $left -lt 10 ]; then
		summary+=("| $name | SKIPPED (budget spent) | 0 s |")
		printf '\n## %s — SKIPPED (budget spent)\n' "$name" >>"$body"
		render
		return
	fi
	[ $limit -gt $left ] && limit=$left
	render "$name | RUNNING (limit ${limit} s) | — "
	if [ "${FLASHATTN_DEVICECHECK_FAIL:-}" = all ]; then
		cmd="set -e; (echo 'FLASHATTN_DEVICECHECK_FAIL=all: forced failure'; exit 3) | tail -n 1; $cmd"
	fi
	# In the background, so that a TERM to the run is handled at once.
	timeout -k 5 "$limit" bash -o pipefail -c "$cmd" >"$out" 2>&1 &
	child=$!
	current=$name
	wait $child
	local rc=$?
	child=
	local status="ok"
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		status="TIMED OUT after ${limit}s"
	elif [ $rc -ne 0 ]; then
		status="FAILED (exit $rc)"
	fi
	local took=$((SECONDS - t0))
	{
		printf '\n===== %s (%s, %ds)\n$ %s\n' "$name" "$status" $took "$cmd"
		cat "$out"
	} >>"$log"
	{
		printf '\n## %s — %s (%ds)\n\n```\n$ %s\n' "$name" "$status" $took "$cmd"
		tail -n "${REPORT_LINES:-80}" "$out"
		printf '```\n'
	} >>"$body"
	summary+=("| $name | $status | $took s |")
	render
}

run() {
	dir=${1:-${OUT:-}}
	[ -n "$dir" ] || { echo "devicecheck run: no output directory (give one, or set OUT)" >&2; return 2; }
	[ -x "$bin/gpu.test" ] || { echo "devicecheck run: devicebin/ is missing: run 'scripts/devicecheck.sh build' first and carry devicebin" >&2; return 2; }
	mkdir -p "$dir/steps"
	log=$dir/devicecheck.log
	body=$dir/report.body
	: >"$log"
	: >"$body"
	summary=()
	nstep=0
	budget=${FLASHATTN_DEVICECHECK_BUDGET:-450}
	t_start=$SECONDS
	started=$(date -u +%FT%TZ)
	local dry=${DRY:-0}
	where="on the lent machine"
	[ "$dry" = 1 ] && where="DRY RUN (no GPU parts)"
	[ "${FLASHATTN_DEVICECHECK_FAIL:-}" = all ] && where="$where, FLASHATTN_DEVICECHECK_FAIL=all (every step must fail)"
	child= current=
	trap '[ -n "$child" ] && kill -TERM $child 2>/dev/null; render "$current | KILLED (signal) | — "; rm -f "$body"; exit 143' TERM INT
	local fa=$bin/flashattn gt=$bin/gpu.test smi=""
	command -v nvidia-smi >/dev/null && [ "$dry" != 1 ] && smi=nvidia-smi

	step "machine" 20 "uname -srm; echo cores: \$(nproc); lscpu | grep 'Model name'; echo CPU features: \$(grep -o -E 'amx[a-z_0-9]*|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u); echo commit \$(cat $bin/commit); if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total,pstate,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu --format=csv; else echo 'no nvidia-smi'; fi"

	# The same-run yardstick (an estimate from the driver's SM count and
	# maximum clock), then every GPU test: TestAttentionGPU unsplit and
	# automatic, TestSplitGPU, TestStreamsGPU, the kernels' registers and
	# spills (TestKernelResourcesGPU). Only the *GPU tests: the
	# interpreter's tests are CPU work, run by CI.
	local gpurun="-test.count=1 -test.v -test.run '^(TestOpen|Test[A-Za-z]*GPU)\$'"
	local gpuflt="'^(---|ok|PASS|FAIL|panic)|^\\s+--- FAIL|^\\s+\\S+_test.go:[0-9]+: (kernel |yardstick|\\{)|no GPU'"
	REPORT_LINES=120 step "gpu tests (yardstick, correctness on every kernel, streams, registers/spills)" 150 "cd gpu && $gt $gpurun -test.timeout 140s 2>&1 | grep -E $gpuflt"
	if [ "$dry" = 1 ]; then
		step "gpu bench (no device: must say so)" 30 "$fa bench -device gpu -seqlen 128 -headdim 64; test \$? -eq 1"
	else
		# nvidia-smi samples clocks and power once a second while the
		# benchmarks run; the step after them summarises the samples.
		[ -n "$smi" ] && { nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 1000 >"$dir/smi.csv" 2>&1 & smipid=$!; }
		for mode in fwd bwd fwdbwd; do
			for d in 64 128 256; do
				[ "$d" = 256 ] && [ "$mode" != fwd ] && continue # backward: head dims 64 and 128
				step "gpu bench $mode d$d" 60 "for c in '' -causal; do $fa bench -device gpu -json -mode $mode -batch 4 -heads 16 -seqlen 4096 -headdim $d \$c -min-ms 100 && $fa bench -device gpu -json -mode $mode -batch 1 -heads 16 -seqlen 16384 -headdim $d \$c -min-ms 100 || exit 1; done"
			done
		done
		step "gpu bench fwdbwd deterministic" 45 "for d in 64 128; do for c in '' -causal; do $fa bench -device gpu -deterministic -json -mode fwdbwd -batch 4 -heads 16 -seqlen 4096 -headdim \$d \$c -min-ms 100 || exit 1; done; done"
		[ -n "${smipid:-}" ] && kill "$smipid" 2>/dev/null
		step "gpu clocks and power while benchmarking (nvidia-smi, 1 s samples)" 10 "test -s $dir/smi.csv && awk -F', *' '{n++; c=\$2; m=\$3; p=\$4; if (n==1||c<cmin) cmin=c; if (c>cmax) cmax=c; if (n==1||m<mmin) mmin=m; if (m>mmax) mmax=m; if (p>pmax) pmax=p; ps+=p; if (\$5>tmax) tmax=\$5} END {if (!n) exit 1; printf \"%d samples: SM clock %d-%d MHz, memory clock %d-%d MHz, power mean %.0f W max %.0f W, temperature max %d C\\n\", n, cmin, cmax, mmin, mmax, ps/n, pmax, tmax}' $dir/smi.csv"
		step "gpu results against the yardstick" 10 "y=\$(grep -h -o -E '= [0-9]+ TFLOP/s dense' $dir/steps/*gpu-tests* | grep -o -E '[0-9]+' | head -1); test -n \"\$y\" && echo \"yardstick (ESTIMATE, see gpu tests): \$y TFLOP/s\" && { grep -h -o 'yardstick MEASURED.*' $dir/steps/*gpu-tests* || true; } && grep -h '^{' $dir/steps/*gpu-bench* | awk -v y=\$y -F'[,:]' '{for (i=1;i<NF;i+=2) {k=\$i; x=\$(i+1); gsub(/[\" {}]/,\"\",k); gsub(/[\"{}]/,\"\",x); v[k]=x} printf \"%-7s d%-3s N%-6s causal=%-5s det=%-5s %7.1f TFLOP/s = %5.1f%% of the yardstick\\n\", v[\"mode\"], v[\"headdim\"], v[\"seqlen\"], v[\"causal\"], (v[\"deterministic\"]==\"\"?\"false\":v[\"deterministic\"]), v[\"tflops\"], 100*v[\"tflops\"]/y; delete v}'"
	fi

	# AMX and bf16 on the CPU, forced through FLASHATTN_KERNEL (bf16=amx,
	# f16=amx: internal/kernel's registry), against the float32 path of the
	# same dtype (bf16=f32) and float32 itself.
	local kn="-test.count=1 -test.run 'AMX|Half|CPUID|SelfCheck'"
	local rn="-test.count=1 -test.short -test.run 'Half|Precision|Tensor'"
	[ "$dry" = 1 ] && kn="-test.count=1 -test.short -test.run 'AMXConfig|CPUID|HalfSelection'" && rn="-test.count=1 -test.short -test.run 'HalfGrid'"
	local amx="FLASHATTN_KERNEL=bf16=amx,f16=amx"
	step "kernel tests, $amx" 60 "cd internal/kernel && $amx $bin/kernel.test $kn -test.v 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic)|amx|AMX'"
	step "root bf16 tests, $amx" 60 "$amx $bin/flashattn.test $rn 2>&1 | tail -5"
	local bn="-seqlen 4096 -headdim 128 -heads 8 -batch 1 -reps 3"
	[ "$dry" = 1 ] && bn="-seqlen 256 -headdim 64 -heads 2 -batch 1 -reps 1 -min-ms 10"
	step "CPU bf16 AMX vs f32 (fwd, fwdbwd)" 60 "for m in fwd fwdbwd; do echo \"== bf16, $amx, \$m\"; $amx $fa bench -dtype bf16 -no-plain -mode \$m $bn | tail -n 3; echo \"== bf16, FLASHATTN_KERNEL=bf16=f32, \$m\"; FLASHATTN_KERNEL=bf16=f32 $fa bench -dtype bf16 -no-plain -mode \$m $bn | tail -n 3; echo \"== f32, \$m\"; $fa bench -dtype f32 -no-plain -mode \$m $bn | tail -n 3; done"

	# 1 → 16 workers, float32 forward and backward.
	local ws="1 2 4 8 16" sn="-seqlen 4096 -headdim 64 -heads 16 -batch 1 -reps 1 -no-plain -min-ms 200"
	[ "$dry" = 1 ] && ws="1 2" && sn="-seqlen 256 -headdim 64 -heads 2 -batch 1 -reps 1 -no-plain -min-ms 10"
	for mode in fwd bwd; do
		step "CPU $mode scaling (workers $ws)" 45 "for w in $ws; do echo \"workers \$w\"; $fa bench -mode $mode $sn -workers \$w | tail -n 2; done"
	done

	trap - TERM INT
	render
	rm -f "$body"
	echo "devicecheck: report in $dir/report.md"
	# The exit status says whether every step passed.
	! printf '%s\n' "${summary[@]}" | grep -q -E 'FAILED|TIMED OUT|SKIPPED'
}

case "${1:-}" in
build) build ;;
run) shift; run "$@" ;;
--dry-run)
	build || exit 1
	DRY=1 run "$bin/dry"
	;;
*)
	sed -n '2,20p' "$0"
	exit 2
	;;
esac
