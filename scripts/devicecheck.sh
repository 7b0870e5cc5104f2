#!/usr/bin/env bash
# The checks that need the lent hardware (an NVIDIA GPU; a Xeon with AMX),
# in two halves, because the lent machine has no Go:
#
#   scripts/devicecheck.sh build        here: the test binaries (gpu, root
#                                       package, internal/kernel) and the CLI,
#                                       static where possible, into devicebin/
#   scripts/devicecheck.sh run [DIR]    there: every check; the report is
#                                       DIR/report.md (default $OUT), raw
#                                       output in DIR/devicecheck.log
#   scripts/devicecheck.sh --dry-run    here: build, then run the parts that
#                                       need no GPU with tiny sizes (the GPU
#                                       parts must report "no CUDA device");
#                                       report in devicebin/dry/report.md
#
# The device tool's call (README, "Checking on a lent GPU machine"):
#   command: bash scripts/devicecheck.sh run
#   carry:   ["devicebin"]
# after `bash scripts/devicecheck.sh build` here. The run stays within the
# tool's 10 minutes per command: every step has its own time limit, and a
# step that fails or times out is reported and the next one runs.
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

# step NAME LIMIT CMD...: runs CMD (in a subshell) with a time limit,
# appending its output to the log and a section to the report.
step() {
	local name=$1 limit=$2
	shift 2
	local t0=$SECONDS
	local out
	out=$(timeout "$limit" bash -c "$*" 2>&1)
	local rc=$?
	local status="ok"
	[ $rc -eq 124 ] && status="TIMED OUT after ${limit}s"
	[ $rc -ne 0 ] && [ $rc -ne 124 ] && status="FAILED (exit $rc)"
	printf '\n===== %s (%s, %ds)\n$ %s\n%s\n' "$name" "$status" $((SECONDS - t0)) "$*" "$out" >>"$log"
	{
		printf '\n## %s — %s (%ds)\n\n```\n$ %s\n' "$name" "$status" $((SECONDS - t0)) "$*"
		printf '%s\n' "$out" | tail -n "${REPORT_LINES:-80}"
		printf '```\n'
	} >>"$report"
	summary+=("| $name | $status | $((SECONDS - t0)) s |")
}

run() {
	local dir=${1:-${OUT:-}}
	[ -n "$dir" ] || { echo "devicecheck run: no output directory (give one, or set OUT)" >&2; return 2; }
	[ -x "$bin/gpu.test" ] || { echo "devicecheck run: devicebin/ is missing: run 'scripts/devicecheck.sh build' first and carry devicebin" >&2; return 2; }
	mkdir -p "$dir"
	log=$dir/devicecheck.log
	report=$dir/report.body
	: >"$log"
	: >"$report"
	summary=()
	local dry=${DRY:-0}
	local fa=$bin/flashattn

	step "machine" 30 "uname -srm; echo cores: \$(nproc); lscpu | grep 'Model name'; echo CPU features: \$(grep -o -E 'amx[a-z_0-9]*|avx512_bf16|avx512f|avx2' /proc/cpuinfo | sort -u); nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo 'no nvidia-smi'; echo commit \$(cat $bin/commit)"

	# The GPU package's tests: on a GPU, TestAttentionGPU runs every case
	# of the interpreter tests on the device against the float64
	# reference, both types, forward and backward.
	if [ "$dry" = 1 ]; then
		step "gpu tests" 120 "cd gpu && $bin/gpu.test -test.count=1 -test.short -test.run 'TestOpen|TestAttentionGPU|TestNaNRow' -test.v 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic)|no GPU'"
		step "gpu bench (no device: must say so)" 30 "$fa bench -device gpu -seqlen 128 -headdim 64; test \$? -eq 1"
	else
		step "gpu tests" 300 "cd gpu && $bin/gpu.test -test.count=1 -test.v -test.timeout 280s 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic|\\s+gpu_test)|GPU'"
		for mode in fwd fwdbwd; do
			for d in 64 128 256; do
				[ "$d" = 256 ] && [ "$mode" != fwd ] && continue
				step "gpu bench $mode d$d" 150 "for n in 4096 16384; do for c in '' -causal; do $fa bench -device gpu -json -mode $mode -batch 4 -heads 16 -seqlen \$n -headdim $d \$c -min-ms 100 || exit 1; done; done"
			done
		done
		step "gpu bench fwdbwd deterministic" 150 "for d in 64 128; do for c in '' -causal; do $fa bench -device gpu -deterministic -json -mode fwdbwd -batch 4 -heads 16 -seqlen 4096 -headdim \$d \$c -min-ms 100 || exit 1; done; done"
	fi

	# AMX and bf16 on the CPU. FLASHATTN_KERNEL=...,bf16=amx is becoming
	# the way to force the AMX bf16 path, FLASHATTN_BF16=amx is today's:
	# each form runs once (a binary that does not know a form ignores it
	# and measures its fastest path, which the output then names).
	local kn="-test.count=1 -test.run 'AMX|Half|CPUID|SelfCheck'"
	local rn="-test.count=1 -test.run 'Half|Precision|Tensor'"
	[ "$dry" = 1 ] && kn="-test.count=1 -test.short -test.run 'AMXConfig|CPUID|HalfSelection'" && rn="-test.count=1 -test.short -test.run 'HalfGrid'"
	for env in "FLASHATTN_BF16=amx" "FLASHATTN_KERNEL=avx512,bf16=amx"; do
		step "kernel tests, $env" 180 "cd internal/kernel && $env $bin/kernel.test $kn -test.v 2>&1 | grep -E '^(---|ok|PASS|FAIL|panic)|amx|AMX'"
		step "root bf16 tests, $env" 180 "$env $bin/flashattn.test $rn 2>&1 | tail -5"
	done
	local bn="-seqlen 4096 -headdim 128 -heads 8 -batch 1 -reps 3"
	[ "$dry" = 1 ] && bn="-seqlen 256 -headdim 64 -heads 2 -batch 1 -reps 1 -min-ms 10"
	step "bf16 bench (AMX forced), FLASHATTN_BF16=amx" 150 "FLASHATTN_BF16=amx $fa bench -dtype bf16 -mode fwd $bn && FLASHATTN_BF16=amx $fa bench -dtype bf16 -mode fwdbwd $bn"
	step "bf16 bench (fastest measured path)" 150 "$fa bench -dtype bf16 -mode fwd $bn"

	# 1 → 16 workers, float32 forward and backward.
	local ws="1 2 4 8 16" sn="-seqlen 4096 -headdim 64 -heads 16 -batch 1 -reps 1 -no-plain -min-ms 200"
	[ "$dry" = 1 ] && ws="1 2" && sn="-seqlen 256 -headdim 64 -heads 2 -batch 1 -reps 1 -no-plain -min-ms 10"
	for mode in fwd bwd; do
		step "CPU $mode scaling (workers $ws)" 150 "for w in $ws; do echo \"workers \$w\"; $fa bench -mode $mode $sn -workers \$w | tail -n 2; done"
	done

	{
		printf '# flashattn device check\n\n%s, commit %s, %s\n\n' "$(date -u +%FT%TZ)" "$(cat "$bin/commit")" "$([ "$dry" = 1 ] && echo 'DRY RUN (no GPU parts)' || echo 'on the lent machine')"
		printf '| step | status | time |\n|---|---|---|\n'
		printf '%s\n' "${summary[@]}"
		cat "$report"
	} >"$dir/report.md"
	rm -f "$report"
	echo "devicecheck: report in $dir/report.md"
	# The exit status says whether every step passed.
	! printf '%s\n' "${summary[@]}" | grep -q -E 'FAILED|TIMED OUT'
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
