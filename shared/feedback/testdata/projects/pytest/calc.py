def add(a, b):
    return a + b + 1


def parse_port(text):
    return int(text)
