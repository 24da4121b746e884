// tests/test_suite_probes.cpp — hidden test cases ("[.]": never listed, so CTest does not run them as tests of their
// own) that the must-fail test "must fail: a test failing exactly four assertions ..." (tests/CMakeLists.txt) runs
// through a separate CTest directory with the suite's own test properties, to prove how CTest reports each:
// a failure is a failure whatever number the binary exits with, and only exit_skipped's marker is a skip.
#include "tests/test_support.h"

// Catch2 2 exits with the number of failed assertions: 4 here, the code the suite once took for "skipped".
TEST_CASE("probe: four failed assertions", "[.][probe]") {
    const int two = 2;
    CHECK(two == 1);
    CHECK(two == 3);
    CHECK(two == 4);
    CHECK(two == 5);
}

TEST_CASE("probe: a skip", "[.][probe]") {
    test_support::exit_skipped("the probe of the skip path");
}

// A skip after a failure would hide the failure: exit_skipped fails the test instead.
TEST_CASE("probe: a failure then a skip", "[.][probe]") {
    const int two = 2;
    CHECK(two == 1);
    test_support::exit_skipped("the probe of a skip after a failure");
}
