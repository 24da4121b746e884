# tests/skip_probe.cmake — cmake -DCTEST=ctest -DPROBE_DIR=dir -P skip_probe.cmake: runs the probe tests that
# tests/CMakeLists.txt registered in PROBE_DIR (with the suite's own arguments and properties) and fails unless
# CTest reports each as it must: four failed assertions and a failure followed by a skip as failed, the skip as
# skipped.
execute_process(COMMAND ${CTEST} --test-dir ${PROBE_DIR} OUTPUT_VARIABLE output ERROR_VARIABLE output)
message("${output}")
set(problems "")
foreach(expected "four_failed_assertions=Failed" "a_skip=Skipped" "a_failure_then_a_skip=Failed")
  string(REPLACE "=" ";" pair "${expected}")
  list(GET pair 0 name)
  list(GET pair 1 status)
  # ctest's summary lists every test that did not pass: "  1 - four_failed_assertions (Failed)".
  string(REGEX MATCH "[0-9]+ - ${name} \\(([A-Za-z ]+)\\)" line "${output}")
  if(NOT CMAKE_MATCH_1 STREQUAL status)
    string(APPEND problems "  ${name}: CTest reported '${CMAKE_MATCH_1}' (empty: passed), expected '${status}'\n")
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "the suite's test properties misreport a test:\n${problems}")
endif()
