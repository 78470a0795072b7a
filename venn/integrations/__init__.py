"""Adapters that let other federated-learning frameworks use Venn as their scheduler."""
