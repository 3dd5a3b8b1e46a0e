"""The leak sweep runs before every other verify test: they send the lab's API key on curl's command line."""


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name != "test_leak_sweep.py")
