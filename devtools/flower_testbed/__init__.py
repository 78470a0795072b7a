"""A local Flower test bed for the examples, the benchmark and the end-to-end test: a
SuperLink and SuperNodes as local processes (`cluster`), emulated node capacity and the
synthetic non-IID data the example apps train on (`node`, `data`), the experiment both
example apps run (`server`, `client`, around a `model`) and the run reports they write
(`report`)."""
