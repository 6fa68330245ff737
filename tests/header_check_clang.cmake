# Compiles every public header on its own with clang++ (Debian 12's clang 14), in ISO and GNU
# mode, warning-free: users build with either compiler, and clang rejects some C++20 that g++
# accepts (before clang 16, a structured binding captured by a lambda).
#   cmake -DCLANGXX=... -DHEADERS="a.hpp;b.hpp" -DINCLUDES="dir;dir" -DWORK=dir -P header_check_clang.cmake
set(flags -fsyntax-only -Wall -Wextra -Werror -pedantic -Wmissing-field-initializers)
foreach(dir ${INCLUDES})
  list(APPEND flags -I${dir})
endforeach()
file(MAKE_DIRECTORY ${WORK})
set(failed "")
foreach(header ${HEADERS})
  get_filename_component(name ${header} NAME_WE)
  set(tu ${WORK}/${name}.cpp)
  file(WRITE ${tu} "#include <meshvk/${name}.hpp>\nint main() {}\n")
  foreach(std c++20 gnu++20)
    execute_process(COMMAND ${CLANGXX} -std=${std} ${flags} ${tu}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message("${name}.hpp with ${CLANGXX} -std=${std}:\n${out}")
      list(APPEND failed "${name}.hpp (-std=${std})")
    endif()
  endforeach()
endforeach()
list(LENGTH HEADERS count)
if(failed)
  message(FATAL_ERROR "public headers that clang++ rejects: ${failed}")
endif()
message("${count} public headers compile with ${CLANGXX} (-std=c++20 and -std=gnu++20)")
