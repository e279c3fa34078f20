"""The sandbox's tests and the real-worker tests run one at a time on one pytest-xdist
worker (tests/conftest.py, KINDS): the sandbox's user has one process limit and these
tests share Redis databases. pytest-xdist 3.8 cannot group tests on pytest 9.2 (xdist
#1386); this test says so if an upgrade brings that back."""


def test_this_file_is_in_the_machine_group_and_xdist_sees_it(request):
    group = request.node.get_closest_marker("xdist_group")

    assert group.args == ("machine",)
    if getattr(request.config.option, "loadgroup", False):
        assert request.node.nodeid.endswith("@machine")
