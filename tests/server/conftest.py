import pytest

from reference_impl.model.llama import load_model
from reference_impl.model.tiny_folder import tiny_folder
from reference_impl.model.tokenizer import load_tokenizer
from reference_impl.server.config import ServerConfig
from reference_impl.server.run import ServerThread


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tiny_folder(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    return load_model(tiny_dir)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir):
    return load_tokenizer(tiny_dir)


@pytest.fixture
def start_server(tiny_dir):
    """start_server(**ServerConfig fields) -> a running ServerThread on 127.0.0.1 serving the tiny folder as 'tiny'."""
    started = []

    def start(served=None, **fields):
        config = ServerConfig(model=str(tiny_dir), served_model_name="tiny", **fields)
        started.append(ServerThread(config, served))
        return started[-1]

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="module")
def shared_server(tiny_dir):
    s = ServerThread(ServerConfig(model=str(tiny_dir), served_model_name="tiny"))
    yield s
    s.stop()
