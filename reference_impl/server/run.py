"""Run the server with uvicorn: in the foreground (`repro serve`), or in a thread on a socket already bound (tests,
`repro bench serve --self`)."""
import socket
import threading
import time

from reference_impl.server.config import ServerConfig


def serve_forever(config: ServerConfig, log_level: str = "info", served=None) -> None:
    import uvicorn

    from reference_impl.server.app import build_app
    uvicorn.run(build_app(config, served), host=config.host, port=config.port, log_level=log_level, access_log=False)


class ServerThread:
    """A real uvicorn server on 127.0.0.1 (a free port) in a thread of this process: `.base_url`, `.app`,
    `.stop()`."""

    def __init__(self, config: ServerConfig, served=None, log_level: str = "warning"):
        import uvicorn

        from reference_impl.server.app import build_app
        self.app = build_app(config, served)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.uvicorn = uvicorn.Server(uvicorn.Config(self.app, log_level=log_level, access_log=False,
                                                     timeout_graceful_shutdown=2))
        self.thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.uvicorn.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)

    @property
    def server(self):
        return self.app.state.server

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(10)
        self.sock.close()
