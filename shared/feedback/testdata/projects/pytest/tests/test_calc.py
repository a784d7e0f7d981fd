import pytest

from calc import add, parse_port


def test_add():
    assert add(2, 2) == 4


@pytest.mark.parametrize("a,b,want", [(1, 1, 2), (0, 0, 0)])
def test_add_table(a, b, want):
    assert add(a, b) == want


def test_parse_port():
    assert parse_port("80x") == 80


class TestGreeting:
    def test_hello(self):
        assert "hello".upper() == "Hello"

    def test_ok(self):
        assert True
