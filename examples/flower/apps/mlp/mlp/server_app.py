from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from mlp.task import MODEL
from venn.integrations.flower.testbed.server import serve

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    serve(grid, context, MODEL)
