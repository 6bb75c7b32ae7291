"""Re-export shim: the fake NKI model moved to :mod:`accelopt_nb.fake_model.nki_model`."""
from accelopt_nb.fake_model.nki_model import (AXPB_KERNEL, AXPB_TASK, KERNELS, FakeNKIModel,  # noqa: F401
                                              Transform, double_tile, harmless_variation,
                                              matmul_column_outer, role_of, set_tile, user_text,
                                              wrong_result, write_axpb_problem)
