#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine: installs what is missing, builds, then runs.
#   ./meshvk.sh tour   build in Release and run the main job (the sharding tour)
#   ./meshvk.sh test   build in Release and run the whole test suite on lavapipe with 8 virtual
#                      devices and the Khronos validation layer, then build with AddressSanitizer
#                      and UndefinedBehaviorSanitizer and run the tests again, then fuzz
#                      each parser for 30 seconds; after the Release tests, the consumer
#                      test: install into a
#                      temporary prefix and build the README's first program as an outside
#                      project (find_package, pkg-config and add_subdirectory)
#   ./meshvk.sh consumer [BUILD_DIR]   just the consumer test, on BUILD_DIR (default build)
#   ./meshvk.sh tsan   the thread-safety test under ThreadSanitizer (not part of `test`)
#   ./meshvk.sh screenshots   headless screenshots of the inspector's views at 1600x1000 under
#                      Xvfb, written to assets/inspector*.png (the README shows them)
#   ./meshvk.sh exhaustive [function...]   the math library over all 2^32 float32 inputs (host
#                      copy against long double libm, then the kernels bit for bit): max-ulp table
#   ./meshvk.sh tutorial-sizes   build the samples in Release and run each once at the tutorials'
#                      sizes (8192x8192 arrays and matmul, the MLP's batch of 8192, ...), with the
#                      wait timeout raised to 30 minutes: each sample's time, and a failure (an
#                      out-of-memory error, say) ends it. Not part of `test`: about 45 minutes on
#                      2 cores
#   ./meshvk.sh fuzz [seconds]   build the libFuzzer harnesses (fuzz/) with clang in build-fuzz and
#                      run each for `seconds` (default 60) from its seed corpus in fuzz/corpus/
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential cmake ninja-build pkg-config libvulkan-dev mesa-vulkan-drivers
          glslang-tools glslang-dev spirv-tools vulkan-validationlayers libgtest-dev libopenblas-dev
          libglfw3-dev libimgui-dev libstb-dev libsimdjson-dev xvfb ccache
          openmpi-bin libopenmpi-dev python3-torch python3-numpy iproute2 util-linux)

# The fuzzers' compiler and its libFuzzer/sanitizer runtimes; the tests also compile every public
# header with this clang (Debian 12's clang 14).
fuzz_packages=(clang libclang-rt-14-dev)

install_missing() {  # install_missing [package...] (default: the packages above)
  local wanted=("$@")
  [ ${#wanted[@]} -eq 0 ] && wanted=("${packages[@]}")
  local missing=()
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  echo "meshvk: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

# ccache when there is one; paths under this checkout are hashed relative to it, so clones at
# any path share the cache.
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD"
fi

build() {  # build DIR [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" > /dev/null
  cmake --build "$dir" -j "$(nproc)"
}

# meshvk as an outside project sees it: install the Release build into a temporary prefix, then
# build and run the README's first program (extracted from README.md, so the README cannot rot)
# with CMake's defaults through find_package(meshvk), through pkg-config, and through
# add_subdirectory(meshvk), which compiles the library again without optimisation (2 minutes on
# 2 cores; MESHVK_CONSUMER_SUBDIR=0 only configures that route).
consumer_test() {  # consumer_test BUILD_DIR
  local build_dir=$1 tmp
  tmp=$(mktemp -d)
  # shellcheck disable=SC2064  # expand $tmp now
  trap "rm -rf '$tmp'" EXIT
  quietly() {  # quietly COMMAND...: its output only when it fails
    "$@" > "$tmp/log" 2>&1 || { cat "$tmp/log"; return 1; }
  }
  quietly cmake --install "$build_dir" --prefix "$tmp/prefix"
  tests/consumer/extract_first_program.sh README.md > "$tmp/first_program.cpp"
  # lavapipe, 8 virtual devices and the validation layer, as the tests run.
  local -a run_env=(MESHVK_ADAPTER="${MESHVK_ADAPTER:-llvmpipe}" MESHVK_NUM_DEVICES=8
                    MESHVK_VALIDATION=1 LP_NUM_THREADS=2)
  check_output() {  # check_output ROUTE BINARY
    local out
    out=$(env "${run_env[@]}" "$2" 2>&1) || { echo "$out"; echo "consumer ($1): the program failed" >&2; return 1; }
    grep -qx 'float32\[4,8\]' <<< "$out" ||
      { echo "$out"; echo "consumer ($1): no 'float32[4,8]' line in the output" >&2; return 1; }
    ! grep -q '^\[vulkan validation' <<< "$out" ||
      { echo "$out"; echo "consumer ($1): the validation layer reported something" >&2; return 1; }
    echo "consumer ($1): ok"
  }

  # find_package, default settings (no build type, CMake's default GNU extensions).
  quietly cmake -S tests/consumer -B "$tmp/find" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" \
          -DFIRST_PROGRAM="$tmp/first_program.cpp"
  quietly cmake --build "$tmp/find"
  check_output find_package "$tmp/find/first_program"

  # pkg-config, C++20 in GNU mode as a plain g++ user would.
  local -a pc_flags
  read -r -a pc_flags <<< "$(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" pkg-config --cflags --libs meshvk)"
  c++ -std=gnu++20 -o "$tmp/first_program_pc" "$tmp/first_program.cpp" "${pc_flags[@]}"
  check_output pkg-config "$tmp/first_program_pc"

  # add_subdirectory, default settings: the tools, tests and their dependencies stay off.
  quietly cmake -S tests/consumer -B "$tmp/subdir" -G Ninja -DMESHVK_SOURCE_DIR="$PWD" \
          -DFIRST_PROGRAM="$tmp/first_program.cpp" "${launcher[@]}"
  if [ "${MESHVK_CONSUMER_SUBDIR:-1}" = 1 ]; then
    quietly cmake --build "$tmp/subdir" -j "$(nproc)"
    check_output add_subdirectory "$tmp/subdir/first_program"
  else
    echo "consumer (add_subdirectory): configured only (MESHVK_CONSUMER_SUBDIR=0)"
  fi
  rm -rf "$tmp"
  trap - EXIT
}

# Tests and the tour run on lavapipe unless MESHVK_ADAPTER says otherwise, one lavapipe thread per
# core (ctest pins the tests to 2, as on the CI machines).
export LP_NUM_THREADS=${LP_NUM_THREADS:-$(nproc)}

# Builds the harnesses and runs each for $1 seconds. New inputs go to build-fuzz/corpus (the
# seeds in fuzz/corpus stay small); a crash leaves its input in build-fuzz/artifacts and fails.
fuzz() {
  local seconds=${1:-60}
  install_missing "${fuzz_packages[@]}"
  cmake -S . -B build-fuzz -G Ninja -DMESHVK_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build build-fuzz -j "$(nproc)"
  local name
  for name in npy partition_spec cli_args trace_json; do
    mkdir -p "build-fuzz/corpus/$name" build-fuzz/artifacts
    echo "meshvk: fuzzing $name for $seconds s"
    build-fuzz/bin/fuzz_$name -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name-" \
      "build-fuzz/corpus/$name" "fuzz/corpus/$name" 2> "build-fuzz/fuzz_$name.log" ||
      { tail -n 40 "build-fuzz/fuzz_$name.log" >&2; echo "meshvk: fuzz_$name failed" >&2; return 1; }
    grep -E "^Done|stat::number_of_executed_units" "build-fuzz/fuzz_$name.log" | tail -n 1
  done
}

# The thread-safety test under ThreadSanitizer: 4 threads of eager ops, jit calls and traces on
# one runtime. Races inside the Vulkan driver, loader and layer are theirs, not ours
# (tests/tsan.supp); any report in meshvk fails the run. TSan's deadlock detector is off: it
# overflows on the locks LLVM's JIT holds inside lavapipe.
tsan() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHVK_TSAN=ON \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "${launcher[@]}" > /dev/null
  cmake --build build-tsan -j "$(nproc)" -t test_threads
  (cd build-tsan && TSAN_OPTIONS="suppressions=$PWD/../tests/tsan.supp detect_deadlocks=0 ${TSAN_OPTIONS:-}" \
     ctest -R '^test_threads$' --output-on-failure)
}

# The inspector's README pictures: each run draws the whole window; the scenario, selection and
# input (a --script) make one view the subject of each. Deterministic up to timings in the
# live timeline.
screenshots() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > /dev/null
  cmake --build build -j "$(nproc)" -t meshvk-inspector sharded_matmul
  local tmp
  tmp=$(mktemp -d)
  local shot=(env MESHVK_NUM_DEVICES=8 xvfb-run -a -s "-screen 0 1600x1000x24"
              build/bin/meshvk-inspector --size 1600x1000 --timeout 300)
  mkdir -p assets
  # The overview: scaling_book's worked programs.
  "${shot[@]}" --scenario scaling_book --frames 40 --screenshot assets/inspector.png
  # Arrays: a 2-way split is two tiles (JAX paints both alike; the window tells them apart).
  "${shot[@]}" --scenario sharded_matmul --mesh 4x2 --spec "w=P('b', None)" --select w \
    --frames 30 --screenshot assets/inspector-tiles.png
  # Arrays: a wide (16, 64) array over 2x4 keeps every label.
  "${shot[@]}" --scenario scaling_book --args "--only matmul_jit" --frames 30 \
    --screenshot assets/inspector-wide.png
  # Hover linking: a tile's devices light up in the mesh view, with the tile's tooltip.
  printf 'wait_arrays\nwait 3\nmove @tile:3\nwait 4\n' > "$tmp/hover.txt"
  "${shot[@]}" --scenario sharded_matmul --mesh 4x2 --select x --script "$tmp/hover.txt" \
    --screenshot assets/inspector-hover.png
  # The values over the layout: the heat map.
  "${shot[@]}" --scenario sharding_basics --select y --heat-map --frames 40 \
    --screenshot assets/inspector-heatmap.png
  # The program view: jit's partitioned program with its collectives.
  "${shot[@]}" --scenario automatic_parallelism --frames 80 \
    --screenshot assets/inspector-program.png
  # shard_map's per-device program, and the collectives table (one row per invocation, with its
  # mesh axes): a click on the timeline's Collectives tab.
  printf 'wait_state finished\nwait 5\nmove @tab:collectives\nwait 1\nclick @tab:collectives\nwait 5\n' \
    > "$tmp/collectives.txt"
  "${shot[@]}" --scenario scaling_shard_map --args "--bdf 256,512,1024" \
    --script "$tmp/collectives.txt" --screenshot assets/inspector-collectives.png
  # The timeline of a trace file (File > Open), as Perfetto would open it.
  MESHVK_NUM_DEVICES=8 build/bin/sharded_matmul --steps 5 --trace "$tmp/trace.json" > /dev/null
  "${shot[@]}" --trace "$tmp/trace.json" --frames 5 --screenshot assets/inspector-trace.png
  rm -rf "$tmp"
  ls -l assets/inspector*.png
}

# Every sample once at the tutorials' sizes (most are their defaults), timed.
tutorial_sizes() {
  local -a runs=(
    "sharding_basics"                                # 8192x8192
    "automatic_parallelism --matmul-size 8192 --golden $PWD/tests/data/golden"  # and matmul 8192x8192
    "manual_parallelism --golden $PWD/tests/data/golden"
    "learn_jax_distributed"
    "mlp_training"                                   # batch 8192, 784-1024-1024-1024-10
    "scaling_shard_map"                              # B, D, F = 1024, 2048, 8192
    "scaling_book"
    "sharded_matmul"
  )
  local run name times wall user sys rc summary="" targets=()
  for run in "${runs[@]}"; do targets+=("${run%% *}"); done
  # Only the samples are built.
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > /dev/null
  cmake --build build -j "$(nproc)" -t "${targets[@]}"
  # Wall-clock and CPU seconds (user + system) of each: on a shared machine the two differ.
  local TIMEFORMAT='%0R %0U %0S'
  for run in "${runs[@]}"; do
    name=${run%% *}
    echo "=== $run"
    rc=0
    # A single-device 8192^3 matmul on lavapipe runs for minutes: longer than the default
    # 2-minute wait timeout.
    # shellcheck disable=SC2086  # the run's arguments
    times=$( { time MESHVK_WAIT_TIMEOUT_MS="${MESHVK_WAIT_TIMEOUT_MS:-1800000}" \
                 build/bin/$run > "build/tutorial-sizes-$name.log" 2>&1; } 2>&1 ) || rc=$?
    read -r wall user sys <<< "$times"
    summary+=$(printf '%-22s %6s s wall, %6s s CPU  %s' "$name" "$wall" $(( user + sys )) \
                 "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")$'\n'
    if [ $rc != 0 ]; then
      tail -5 "build/tutorial-sizes-$name.log"
      printf '%s' "$summary"
      return 1
    fi
  done
  printf '%s' "$summary"
  echo "(outputs in build/tutorial-sizes-*.log)"
}

case "${1:-}" in
  tutorial-sizes)
    install_missing
    tutorial_sizes
    ;;
  screenshots)
    install_missing
    screenshots
    ;;
  tour)
    install_missing
    build build
    build/bin/sharding_basics
    ;;
  test)
    install_missing
    install_missing "${fuzz_packages[@]}"  # clang also compiles every public header (ctest)
    build build
    (cd build && ctest --output-on-failure -j 2)
    # The add_subdirectory route configured only (a third compile of the library, minutes of CI's
    # time); `./meshvk.sh consumer` builds it too.
    MESHVK_CONSUMER_SUBDIR=${MESHVK_CONSUMER_SUBDIR:-0} consumer_test build
    # The sanitizer build: leaks inside the Vulkan driver and loader are theirs, not ours. ASan's
    # default 256 MB quarantine of freed memory grows a test binary to 8 GB next to lavapipe
    # (measured); 32 MB keeps it near 2 GB and still catches recent use-after-free.
    # Line tables only (-g1): a third less compile time than -g, the same stack traces. Left out
    # of the sanitizer run, as the Release run covers them: what only compiles (the clang header
    # check), benchmarks, the PyTorch comparison, the collective sweeps of 3 to 8 devices (the
    # same code as the process tests, at many sizes; those of 2 processes x 1 device stay, ~10 s:
    # the two-member ring's own path) and the two tests that run the tutorials and the inspector's
    # scenarios at full size (7 minutes under ASan on 2 cores), the samples' run (test_samples:
    # the engine paths they take run under ASan in the engine's own tests), and the GPT step's byte
    # accounting in four modes (a minute under ASan; the partitioner's code runs in other tests),
    # and the two-node tests (the staged tier's code, which the process tests run under ASan), the
    # fsdp GPT step between processes, and the slow-step liveness tests (timed steps of 3 s
    # against a 1 s timeout: the heartbeat's code runs under ASan in the failure tests). The
    # inspector is not built there (its tests run in the Release stage): CI's cold run reached
    # 61 minutes with it.
    build build-asan -DMESHVK_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DMESHVK_BUILD_BENCH=OFF \
      -DMESHVK_BUILD_INSPECTOR=OFF
    (cd build-asan && LSAN_OPTIONS=suppressions=$PWD/../tests/lsan.supp \
       ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=32} \
       UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j 2 \
       -E '^(header_check_clang|gpt_vs_pytorch|test_tutorial_cases|test_inspector_tiles|test_gpt_communication|test_samples)$|^processes_collective_sweep_np(2_8|3_6|3_3)_|^processes_two_nodes_|^processes_gpt_fsdp$|^processes_slow_step_')
    # ThreadSanitizer is `./meshvk.sh tsan`, not part of this run: a third build of the whole
    # engine for one test, about 10 minutes on 2 cores, which kept CI near its limit. Run it
    # after changing anything threads share (the runtime, its communication thread, tapes).
    fuzz "${MESHVK_FUZZ_SECONDS:-20}"
    ;;
  fuzz)
    fuzz "${2:-60}"
    ;;
  tsan)
    install_missing
    tsan
    ;;
  consumer)
    # Just the consumer test, on BUILD_DIR (default build), built first.
    install_missing
    build "${2:-build}"
    consumer_test "${2:-build}"
    ;;
  exhaustive)
    # The math library over all 2^32 inputs of each function: host copy vs long double libm
    # (max ulp table), then the kernels on lavapipe bit for bit against the host copy. Extra
    # arguments name functions (exhaustive exp tanh); MESHVK_EXHAUSTIVE_DEVICE=0 skips the device.
    install_missing
    cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" > /dev/null
    cmake --build build -j "$(nproc)" -t mathlib_exhaustive
    device_flag=()
    [ "${MESHVK_EXHAUSTIVE_DEVICE:-1}" = 1 ] && device_flag=(--device)
    MESHVK_ADAPTER="${MESHVK_ADAPTER:-llvmpipe}" MESHVK_NUM_DEVICES=1 \
      build/bin/mathlib_exhaustive "${device_flag[@]}" "${@:2}"
    ;;
  *)
    echo "usage: ./meshvk.sh tour | test | tutorial-sizes | consumer [BUILD_DIR] | tsan | fuzz [seconds] | screenshots | exhaustive [function...]" >&2
    exit 2
    ;;
esac
