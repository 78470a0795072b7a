from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from venn_flower import answer_venn_queries, venn_mod

from devtools.flower_testbed import client as experiment
from mlp.task import MODEL

app = ClientApp(mods=[venn_mod])
answer_venn_queries(app)  # lets a run go on when Venn is down from its start


@app.train()
def train(message: Message, context: Context) -> Message:
    return experiment.train(message, context, MODEL)


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    return experiment.evaluate(message, context, MODEL)
