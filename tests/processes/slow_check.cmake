# A healthy job whose step is longer than MESHVK_WAIT_TIMEOUT_MS (1 s here): under `mpirun -np 2`
# x 4 devices, process_failure slow|slow_device, process 1 computes for 3 s (on the host, or on
# its devices) before the third all-reduce while process 0 waits in it. The wait must go on, as
# process 1 shows progress (runtime/liveness.hpp): every step runs, the job ends well, and no
# meshvk message is printed (a note that a heartbeat came late, on a loaded machine, aside).
# EXTRA_ENV ("NAME=value NAME=value") goes to the processes too (-x), e.g. the staged transport.
#   cmake -DPROGRAM=path -DMODE=slow|slow_device [-DEXTRA_ENV=...] -DMPIEXEC=mpirun -P slow_check.cmake
include(${CMAKE_CURRENT_LIST_DIR}/mpirun_env.cmake)  # EXTRA_ENV, extra_x
include(${CMAKE_CURRENT_LIST_DIR}/process_count.cmake)  # NP, DEVICES, total, oversubscribe
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env MESHVK_NUM_DEVICES=${DEVICES} LP_NUM_THREADS=1
          MESHVK_WAIT_TIMEOUT_MS=1000 SLOW_SECONDS=3 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
          OMPI_MCA_btl_vader_single_copy_mechanism=none ${EXTRA_ENV}
          ${MPIEXEC} ${oversubscribe} -np ${NP} -x MESHVK_NUM_DEVICES -x LP_NUM_THREADS -x MESHVK_WAIT_TIMEOUT_MS
          -x SLOW_SECONDS ${extra_x} ${PROGRAM} ${MODE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 120)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}\n${err}")
# A note that a heartbeat came late (a loaded machine) is allowed; any other meshvk message is not.
string(REGEX REPLACE "meshvk: process [0-9]+: [^\n]*waiting for it up to [^\n]*" "" unnoted "${all}")
if(NOT rc EQUAL 0 OR NOT all MATCHES "step 4: ${total}" OR unnoted MATCHES "meshvk: process")
  message(FATAL_ERROR "the job with a step of 3 s and MESHVK_WAIT_TIMEOUT_MS=1000 did not end "
                      "well (exit ${rc}, ${seconds} s):\n${all}")
endif()
if(NOT all MATCHES "process 1: computed for ([0-9.]+) s")
  message(FATAL_ERROR "process 1 did not say how long it computed:\n${all}")
endif()
if(CMAKE_MATCH_1 LESS 2)
  message(FATAL_ERROR "process 1 computed for ${CMAKE_MATCH_1} s only, not past the timeout:\n${all}")
endif()
message(STATUS "ended well in ${seconds} s; ${CMAKE_MATCH_0}")
