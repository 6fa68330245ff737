# `meshvk-bench peers` on a tiny configuration: every row is printed, each with a ratio and
# PASS/MISS or with the reason it has no peer figure; without PyTorch the PyTorch rows say it is
# missing; a bad --rows is refused. Figures are not checked (timings on a shared machine).
#   cmake -DBENCH=path/to/meshvk-bench -P bench_peers_check.cmake
set(tiny --reps 1 --batch 64 --matmul 64 --elements 4096 --min-bytes 4KiB --max-bytes 4KiB
    --timeout 600)

function(run_bench out_var)
  execute_process(COMMAND ${BENCH} peers ${ARGN} OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "meshvk-bench peers ${ARGN} exited with ${rc}\n${out}\n${err}")
  endif()
  if(err MATCHES "\\[vulkan validation")
    message(FATAL_ERROR "the validation layer reported something:\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# Each row as a table line: "| name | meshvk | peer | peer time | ratio | target |".
function(expect_row output name peer count)
  string(REGEX MATCHALL "\\| ${name} +\\| [^|\n]+\\| ${peer}[^|\n]*\\|[^\n]*" lines "${output}")
  list(LENGTH lines found)
  if(NOT found EQUAL count)
    message(FATAL_ERROR "expected ${count} row(s) '${name}' vs '${peer}', found ${found}:\n${output}")
  endif()
  foreach(line IN LISTS lines)
    if(line MATCHES "\\| [0-9]+\\.[0-9][0-9]x +\\| >= [0-9.]+x (PASS|MISS) +\\|$")
      continue()  # a ratio and its verdict
    endif()
    # No figure: the peer-time cell must say why, and the verdict n/a.
    if(NOT line MATCHES "\\| [^|]*[a-z][^|]* \\| - +\\| >= [0-9.]+x n/a +\\|$")
      message(FATAL_ERROR "row without a ratio or a reason:\n${line}")
    endif()
    message(STATUS "no peer figure (allowed, with its reason): ${line}")
  endforeach()
endfunction()

run_bench(out ${tiny})
message(STATUS "${out}")
set(mlp "MLP step 784-1024-1024-1024-10, batch 64")
expect_row("${out}" "${mlp}, one device" "PyTorch" 1)
expect_row("${out}" "${mlp}, 8-way data parallel" "PyTorch DDP gloo x8" 1)
set(gpt "GPT step \\(d_model 128, 2 layers, seq 64, batch 16, Adam\\)")
expect_row("${out}" "${gpt}, one device" "PyTorch" 1)
expect_row("${out}" "${gpt}, 8-way data parallel" "PyTorch" 1)
expect_row("${out}" "${gpt}, 8-way dp \\+ tp \\(2, 4\\)" "PyTorch" 1)
if(NOT out MATCHES "\nGPT step, 8-way data parallel / one device: [0-9.]+x \\(target <= 1.25x (PASS|MISS)\\)\n")
  message(FATAL_ERROR "no 'GPT step, 8-way data parallel / one device' line")
endif()
foreach(mode single dp_tp)
  if(NOT out MATCHES "GPT step ${mode}, one profiled replay: wall [0-9.]+ ms, [1-9][0-9]* kernels per step")
    message(FATAL_ERROR "no kernels-per-step line for the GPT step in ${mode}")
  endif()
endforeach()
expect_row("${out}" "matmul f32 64\\^3" "PyTorch" 1)
expect_row("${out}" "2\\*sin\\(x\\)\\+1, 4096 f32" "PyTorch" 1)
expect_row("${out}" "sum, 4096 f32" "PyTorch" 1)
expect_row("${out}" "softmax cross-entropy \\[64,10\\]" "PyTorch" 1)
foreach(op all-reduce all-gather reduce-scatter)
  expect_row("${out}" "${op} 4 KiB x8" "PyTorch gloo x8" 1)
  expect_row("${out}" "${op} 4 KiB x8" "Open MPI x8" 1)
endforeach()
if(NOT out MATCHES "\n15 rows: [0-9]+ PASS, [0-9]+ MISS, [0-9]+ without a peer figure\n")
  message(FATAL_ERROR "no '15 rows: ...' summary line")
endif()
if(NOT out MATCHES "machine: ")
  message(FATAL_ERROR "no machine summary")
endif()

# No PyTorch: its rows say so, the Open MPI rows still run.
set(ENV{MESHVK_PEERS_PYTHON} /nonexistent/python3)
run_bench(out ${tiny} --rows sum,all-gather)
unset(ENV{MESHVK_PEERS_PYTHON})
expect_row("${out}" "sum, 4096 f32" "PyTorch" 1)
if(NOT out MATCHES "\\| sum, 4096 f32 [^\n]*missing: PyTorch needs /nonexistent/python3")
  message(FATAL_ERROR "the sum row does not say PyTorch is missing:\n${out}")
endif()
expect_row("${out}" "all-gather 4 KiB x8" "Open MPI x8" 1)
if(NOT out MATCHES "\n3 rows: ")
  message(FATAL_ERROR "--rows sum,all-gather should give 3 rows:\n${out}")
endif()

# A row group that does not exist is refused, naming the valid ones.
execute_process(COMMAND ${BENCH} peers --rows matmul,nonsense OUTPUT_VARIABLE out
                ERROR_VARIABLE err RESULT_VARIABLE rc)
if(rc EQUAL 0 OR NOT err MATCHES "no row group named 'nonsense'; valid: train, train-dp")
  message(FATAL_ERROR "--rows nonsense: rc ${rc}\n${out}\n${err}")
endif()
