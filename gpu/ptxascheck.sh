#!/usr/bin/env bash
# Assembles every committed PTX module (gpu/ptx/*.ptx) with NVIDIA's ptxas for
# sm_80 and sm_90 and fails on any error, warning or spilled byte; prints
# registers, shared memory and the estimated occupancy of each kernel
# (TestPTXAS in gpu/_ptxgen does the assembling and the table).
#
# ptxas comes from $PTXAS if set, else from a cache
# (${FLASHATTN_CACHE:-$HOME/.cache/flashattn}/ptxas-<version>/ptxas), else it
# is fetched once: Debian bookworm's non-free package nvidia-cuda-toolkit
# (CUDA 11.8) carries /usr/bin/ptxas. The package is downloaded with a private
# apt configuration (its own sources list with non-free, its own lists and
# cache under the cache directory), so that the system's apt sources and
# state are not touched, and only ptxas is unpacked from it: nothing is
# installed.
#
# Without network the download fails and so does this script, loudly: a
# silent skip would let spills (or PTX that does not assemble) land
# unnoticed. FLASHATTN_SKIP_PTXAS=1 skips it on purpose, with a warning.
set -euo pipefail
cd "$(dirname "$0")"

if [ "${FLASHATTN_SKIP_PTXAS:-}" = 1 ]; then
	echo "ptxascheck: SKIPPED (FLASHATTN_SKIP_PTXAS=1): the PTX was not assembled" >&2
	exit 0
fi

version=11.8.89~11.8.0-5~deb12u1
cache=${FLASHATTN_CACHE:-${HOME:-/tmp}/.cache/flashattn}
dir=$cache/ptxas-${version//[~]/_}

fetch() {
	local apt=$cache/apt
	mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$dir"
	cat >"$apt/sources.list" <<-EOF
		deb http://deb.debian.org/debian bookworm main contrib non-free non-free-firmware
		deb http://deb.debian.org/debian bookworm-updates main contrib non-free non-free-firmware
		deb http://deb.debian.org/debian-security bookworm-security main contrib non-free non-free-firmware
	EOF
	local o=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o Debug::NoLocking=1
		-o APT::Sandbox::User=root -qq)
	echo "ptxascheck: fetching ptxas (Debian non-free nvidia-cuda-toolkit) into $dir" >&2
	apt-get "${o[@]}" update >&2 || { echo "ptxascheck: apt-get update failed (no network?): cannot fetch ptxas" >&2; return 1; }
	local want
	want=$(apt-cache "${o[@]}" policy nvidia-cuda-toolkit | awk '/Candidate:/ {print $2}')
	[ -n "$want" ] && [ "$want" != "(none)" ] || { echo "ptxascheck: nvidia-cuda-toolkit not found in bookworm non-free" >&2; return 1; }
	[ "$want" = "$version" ] || echo "ptxascheck: note: the archive has nvidia-cuda-toolkit $want (this script was written for $version)" >&2
	(cd "$apt/archives" && rm -f nvidia-cuda-toolkit_*.deb && apt-get "${o[@]}" download nvidia-cuda-toolkit >&2)
	local deb
	deb=$(ls "$apt"/archives/nvidia-cuda-toolkit_*.deb)
	dpkg-deb --fsys-tarfile "$deb" | tar -x -O ./usr/bin/ptxas >"$dir/ptxas.part"
	chmod +x "$dir/ptxas.part"
	mv "$dir/ptxas.part" "$dir/ptxas"
	rm -f "$deb" # 84 MB; the 19 MB ptxas is what the cache keeps
}

if [ -z "${PTXAS:-}" ]; then
	PTXAS=$dir/ptxas
	[ -x "$PTXAS" ] || fetch || exit 1
fi
"$PTXAS" --version | tail -n 2
export PTXAS
cd _ptxgen
go test -count=1 -run '^TestPTXAS$' -v . | grep -v '^=== RUN' 
