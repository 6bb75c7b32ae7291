"""FAKE neuronxcc package for tests (see tests/fakes/neuron/README.md)."""
