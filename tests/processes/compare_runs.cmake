# Runs one program as 1 process x 8 devices, 1 process x 2 adapters x 4 devices (lavapipe opened
# twice; not with -DNO_ADAPTERS=1) and `mpirun -np 2` x 4 devices, and checks that the three print the same text (the
# processes line of process_workload and timing lines aside), that every run exits 0 and that
# the validation layer says nothing.
# EXTRA_ENV ("NAME=value NAME=value") goes to the mpirun processes too (-x), e.g. the staged transport
# over TCP, as between nodes: -DEXTRA_ENV="MESHVK_PROCESS_TRANSPORT=staged OMPI_MCA_btl=self,tcp".
# WRAPPER: a command each mpirun process runs the program through (private_shm.sh);
# EXPECT_STDERR: a regular expression the mpirun run's standard error must match.
# EXPECT: a line the mpirun run must print (process_workload's "between processes: staged"), left
# out of the comparison like every "between processes:" line.
#   cmake -DPROGRAM=path [-DARGS="--size 512"] [-DEXTRA_ENV=...] [-DEXPECT=line] -DMPIEXEC=mpirun
#         -DGOLDEN=dir -P compare_runs.cmake
separate_arguments(ARGS UNIX_COMMAND "${ARGS}")  # "--size 512" -> --size;512
# NP: processes of the mpirun run (2 unless given); DEVICES: devices in all (8 unless given, a
# multiple of NP), DEVICES / NP each.
if(NOT NP)
  set(NP 2)
endif()
if(NOT DEVICES)
  set(DEVICES 8)
endif()
math(EXPR per_process "${DEVICES} / ${NP}")
include(${CMAKE_CURRENT_LIST_DIR}/mpirun_env.cmake)  # EXTRA_ENV, extra_x
set(common MESHVK_VALIDATION=1 LP_NUM_THREADS=1 MESHVK_GOLDEN_DIR=${GOLDEN}
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1)

function(run label out_var)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${common} ${ARGN}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${label}: exited with ${rc}\n${out}\n${err}")
  endif()
  if(err MATCHES "validation (error|warning)|Validation Error")
    message(FATAL_ERROR "${label}: the validation layer reported something:\n${err}")
  endif()
  set(${out_var}_raw "${out}" PARENT_SCOPE)
  set(${out_var}_err "${err}" PARENT_SCOPE)
  # Lines that differ between any two runs: wall-clock timings, the process count and how bytes
  # moved between processes.
  string(REGEX REPLACE "between processes: [a-z]+\n" "" out "${out}")
  string(REGEX REPLACE "[^\n]*this machine:[^\n]*\n" "" out "${out}")
  string(REGEX REPLACE "[^\n]*(per loop|ms/step|ms per|ms each|step time)[^\n]*\n" "" out "${out}")
  string(REGEX REPLACE "devices ([0-9]+) processes [0-9]+" "devices \\1" out "${out}")
  # A constant made inside jit is broadcast from the first device of each process, so the bytes
  # of reshards (gpt's "reshard x6 (462.0 KiB per device)") depend on the process count.
  string(REGEX REPLACE "(reshard x[0-9]+) \\([^)]*\\)" "\\1" out "${out}")
  # Between processes a lax.scan's body runs again each iteration instead of being replayed
  # (graph/traced_loop.hpp), so gpt's program, with its layers in a scan, holds every layer
  # there: its size and the collectives counted in its text differ, its results do not.
  string(REGEX REPLACE "(^|\n)(program size|collectives per step):[^\n]*" "\\1" out "${out}")
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

run("1 process x ${DEVICES} devices" one MESHVK_NUM_DEVICES=${DEVICES} ${PROGRAM} ${ARGS})
set(others processes)
if(NOT NO_ADAPTERS)  # the samples skip it: test_adapters covers two adapters
  run("1 process x 2 adapters, ${DEVICES} devices" adapters MESHVK_NUM_DEVICES=${DEVICES}
      MESHVK_ADAPTERS=llvmpipe,llvmpipe ${PROGRAM} ${ARGS})
  list(APPEND others adapters)
endif()
run("mpirun -np ${NP} x ${per_process} devices ${EXTRA_ENV}" processes
    MESHVK_NUM_DEVICES=${per_process} ${EXTRA_ENV}
    ${MPIEXEC} -np ${NP} -x MESHVK_NUM_DEVICES -x MESHVK_VALIDATION -x LP_NUM_THREADS
    -x MESHVK_GOLDEN_DIR ${extra_x} ${WRAPPER} ${PROGRAM} ${ARGS})
if(EXPECT_STDERR AND NOT processes_err MATCHES "${EXPECT_STDERR}")
  message(FATAL_ERROR "mpirun -np ${NP} did not say '${EXPECT_STDERR}' on standard error:\n${processes_err}")
endif()
if(EXPECT AND NOT processes_raw MATCHES "(^|\n)${EXPECT}\n")
  message(FATAL_ERROR "mpirun -np ${NP} did not print '${EXPECT}':\n${processes_raw}")
endif()
string(LENGTH "${one}" length)
if(one MATCHES "MISMATCH")
  message(FATAL_ERROR "1 process x ${DEVICES} devices disagrees with the host reference:\n${one}")
endif()
if(length LESS 20)
  message(FATAL_ERROR "the program printed almost nothing:\n${one}")
endif()
foreach(other ${others})
  if(NOT "${${other}}" STREQUAL "${one}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/one.txt "${one}")
    file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/${other}.txt "${${other}}")
    execute_process(COMMAND diff ${CMAKE_CURRENT_BINARY_DIR}/one.txt ${CMAKE_CURRENT_BINARY_DIR}/${other}.txt
                    OUTPUT_VARIABLE difference)
    message(FATAL_ERROR "${other} printed something else than 1 process x ${DEVICES} devices:\n${difference}")
  endif()
endforeach()
message(STATUS "identical: 1 process and ${others}")
