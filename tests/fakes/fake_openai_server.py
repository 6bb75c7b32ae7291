"""Re-export shim: the fake OpenAI server moved to :mod:`accelopt_nb.fake_model.server`."""
from accelopt_nb.fake_model.server import (Action, Disconnect, Fail, FakeOpenAIServer, Malformed,  # noqa: F401
                                           Reply, Responder, Slow, count_tokens, fake_openai_fixture)
