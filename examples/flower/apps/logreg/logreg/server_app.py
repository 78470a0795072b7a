from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from logreg.task import MODEL
from venn.integrations.flower.testbed.server import serve

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    serve(grid, context, MODEL)
