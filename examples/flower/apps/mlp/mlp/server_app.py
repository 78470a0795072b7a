from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from devtools.flower_testbed.server import serve
from mlp.task import MODEL

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    serve(grid, context, MODEL)
