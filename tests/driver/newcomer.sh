# The README's first program as a newcomer types it: its blocks in order, as one shell session
# (readme_first.cmake starts this under env -i, with nothing set but HOME and PATH).
#   bash newcomer.sh CLONE BLOCKS HOW LOG        HOW: cmake or upcxx (the two ways to build)
set -e
cd "$1"
. "$2/settings.sh"
. "$2/no-gpu.sh"
. "$2/folder.sh"
cp "$2/main.cpp" "$2/CMakeLists.txt" . # the README: "main.cpp", "CMakeLists.txt"
set -x
. "$2/build-$3.sh"
set +x
rc=0
timeout 120 bash "$2/run-$3.sh" >"$4" 2>&1 || rc=$?
exit "$rc"
