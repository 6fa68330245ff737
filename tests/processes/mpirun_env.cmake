# Shared by compare_runs.cmake and failure_check.cmake: EXTRA_ENV ("NAME=value NAME=value") as a
# list for `cmake -E env`, and `extra_x`, the `-x NAME` options that hand each to mpirun's
# processes.
separate_arguments(EXTRA_ENV UNIX_COMMAND "${EXTRA_ENV}")
set(extra_x "")
foreach(assignment ${EXTRA_ENV})
  string(REGEX REPLACE "=.*" "" name "${assignment}")
  list(APPEND extra_x -x ${name})
endforeach()
