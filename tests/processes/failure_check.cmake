# `mpirun -np 2` x 4 devices of process_failure MODE (kill: process 1 dies mid-collective; hang:
# it stops answering; diverge: it jits another program): process 0 must end the job with a
# message naming process 1, the all-reduce it waited in and its ring step (diverge: the jit
# function), within MESHVK_WAIT_TIMEOUT_MS (3 s here) plus start-up, not hang. link_down: over
# two simulated nodes (MPIEXEC=two_nodes.sh), the link between them goes down mid-job;
# TWO_NODES=1: the job runs there (MPIEXEC=two_nodes.sh), where a killed rank is named by its
# missing heartbeat.
# EXTRA_ENV ("NAME=value NAME=value") goes to the processes too (-x), e.g. the staged transport.
#   cmake -DPROGRAM=path -DMODE=kill|hang|diverge [-DEXTRA_ENV=...] -DMPIEXEC=mpirun -P failure_check.cmake
include(${CMAKE_CURRENT_LIST_DIR}/mpirun_env.cmake)  # EXTRA_ENV, extra_x
include(${CMAKE_CURRENT_LIST_DIR}/process_count.cmake)  # NP, DEVICES, total, oversubscribe
string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env MESHVK_NUM_DEVICES=${DEVICES} MESHVK_VALIDATION=1 LP_NUM_THREADS=1
          MESHVK_WAIT_TIMEOUT_MS=3000 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
          OMPI_MCA_btl_vader_single_copy_mechanism=none ${EXTRA_ENV}
          ${MPIEXEC} ${oversubscribe} -np ${NP} -x MESHVK_NUM_DEVICES -x MESHVK_VALIDATION -x LP_NUM_THREADS
          -x MESHVK_WAIT_TIMEOUT_MS ${extra_x} ${PROGRAM} ${MODE}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 240)
string(TIMESTAMP stop "%s")
math(EXPR seconds "${stop} - ${start}")
set(all "${out}\n${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "the job ended well although process 1 ${MODE}s:\n${all}")
endif()
if(NOT all MATCHES "step 1: ${total}")
  message(FATAL_ERROR "the collectives before the failure did not run:\n${all}")
endif()
if(MODE STREQUAL "stop_exchange")
  # Named stopped: /proc on one node; across nodes, its heartbeat stopped.
  set(expected "meshvk: process 0: process 0 at to_host of float32[^\n]*did not complete: process 1 sent nothing for it[^\n]*process 1 (is stopped \\(SIGSTOP|sent no heartbeat for [0-9]+ ms: it was stopped)[^\n]*MESHVK_WAIT_TIMEOUT_MS=3000")
elseif(MODE STREQUAL "shape_exchange")
  set(expected "meshvk: process [01]: process [01] runs a different program: it is at to_host of float32\\([0-9]+,\\)[^\n]*while process [01] is at to_host of float32")
elseif(MODE STREQUAL "collective_exchange")
  # Process 0 waits in the exchange for process 1, which waits in the all-reduce for process 0:
  # whichever times out first names the other.
  # Neither shows progress (each waits inside meshvk): the one named is alive and waiting itself.
  set(expected "meshvk: process (0: process 0 at to_host of float32[^\n]*process 1 sent nothing for it[^\n]*process 1 is alive[^\n]*itself waiting inside meshvk|1: timed out: [^\n]*all_reduce[^\n]*process 0 is alive[^\n]*itself waiting inside meshvk)")
elseif(MODE STREQUAL "stop_wait")
  # Named stopped by process 0 (by /proc on one node, by its heartbeat across nodes).
  set(expected "meshvk: process 0: timed out: process 1 (is stopped \\(SIGSTOP|sent no heartbeat for [0-9]+ ms: it was stopped)[^\n]*all_reduce\\(ring\\)")
elseif(MODE STREQUAL "diverge")
  set(expected "jit\\(step\\): process [01] traced a program whose transfers between processes differ")
elseif(MODE STREQUAL "hang" AND NP GREATER 2)
  # Three processes, process 1 hung: a waiting process names it idle in its own code, and tells
  # the other waiting process apart from it (alive, itself waiting inside meshvk).
  set(expected "meshvk: process [02]: timed out: no process of the job showed progress[^\n]*(process [02] is alive[^\n]*itself waiting inside meshvk[^\n]*process 1 is alive[^\n]*in the program's own code|process 1 is alive[^\n]*in the program's own code[^\n]*process [02] is alive[^\n]*itself waiting inside meshvk)")
elseif(MODE STREQUAL "hang")
  # Process 1 is alive (its heartbeat goes on) but shows no progress, in its own code.
  set(expected "meshvk: process 0: timed out: no process of the job showed progress for [0-9]+ ms \\(MESHVK_WAIT_TIMEOUT_MS=3000\\)[^\n]*all_reduce\\(ring\\), [a-z-]+ step [1-7] of 7[^\n]*process 1 is alive and has shown no progress for [0-9]+ ms in the program's own code")
elseif(MODE STREQUAL "link_down")
  # tests/processes/two_nodes.sh takes the link down: whichever process times out first names
  # the other (process 1's message cannot reach mpirun without the link), and every process ends.
  set(expected "meshvk: process [01]: timed out: [^\n]*process [01] sent no heartbeat for [0-9]+ ms[^$]*every process_failure process had ended [0-9]+ s later")
elseif(TWO_NODES)
  # Killed on another node: /proc there is not ours to read; its heartbeat stops, and process 0
  # names it after half a second, before Open MPI's mpirun ends the job (SIGTERM a second after
  # it noticed; its own message names the rank too).
  set(expected "meshvk: process 0: process 1 sent no heartbeat for [0-9]+ ms: it was stopped \\(SIGSTOP\\) or died, or its node cannot be reached")
else()
  set(expected "meshvk: process 0: process 1 of the job died[^\n]*all_reduce\\(ring\\), [a-z-]+ step [1-7] of 7")
endif()
if(NOT all MATCHES "${expected}")
  message(FATAL_ERROR "no message matching '${expected}' (exit ${rc}, ${seconds} s):\n${all}")
endif()
if(MODE STREQUAL "stop_wait" AND all MATCHES "meshvk: process 1: (timed out|process 0 of the job died)[^\n]*")
  # Resumed by Open MPI's SIGCONT, process 1 must not blame process 0 for the time it was
  # stopped (it may say that process 0 has ended, or that no heartbeat came since it resumed).
  message(FATAL_ERROR "process 1, stopped, then resumed, blamed another: '${CMAKE_MATCH_0}':\n${all}")
endif()
if(seconds GREATER 120)
  message(FATAL_ERROR "the job took ${seconds} s to end")
endif()
message(STATUS "ended in ${seconds} s: ${CMAKE_MATCH_0}")
