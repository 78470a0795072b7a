"""Venn schedules Flower (flwr >= 1.42): the Venn deployment's side.

Flower's side (the strategy wrapper, the ClientApp mod, the SuperNode launcher) is the
separate distribution `venn-flower` (folder venn-flower/, import `venn_flower`), which needs
only flwr and aiohttp. Here: the bridge its ServerApps speak to
(`python -m venn.integrations.flower.bridge`), and the local test bed of the example, the
benchmark and the tests (`testbed`). docs/flower.md tells the whole story.
"""
