from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from mlp.task import MODEL
from venn.integrations.flower import answer_venn_queries, venn_mod
from venn.integrations.flower.testbed import client as experiment

app = ClientApp(mods=[venn_mod])
answer_venn_queries(app)


@app.train()
def train(message: Message, context: Context) -> Message:
    return experiment.train(message, context, MODEL)


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    return experiment.evaluate(message, context, MODEL)
