# The failure and slow-step checks' job size: NP processes (2 by default) of DEVICES devices (4),
# `total` devices in all, and `oversubscribe` for mpirun past 2 processes (2 cores).
if(NOT NP)
  set(NP 2)
endif()
if(NOT DEVICES)
  set(DEVICES 4)
endif()
math(EXPR total "${NP} * ${DEVICES}")
set(oversubscribe "")
if(NP GREATER 2)
  set(oversubscribe --oversubscribe)
endif()
