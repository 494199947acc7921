"""``hpex.kernels.CTCLoss``, as optimum-habana's wav2vec2 calls it on Gaudi, gives torch's CTC
loss and gradient on the CPU."""

from __future__ import annotations


def test_ctc_loss_apply_equals_torch_on_the_cpu(run):
    run("""
import torch
from habana_frameworks.torch.hpex.kernels import CTCLoss

torch.manual_seed(0)
logits = torch.randn(12, 3, 6)  # time, batch, classes (blank 0)
targets = torch.randint(1, 6, (3, 5))
input_lengths = torch.tensor([12, 10, 9])
target_lengths = torch.tensor([5, 3, 4])

for reduction in ["mean", "sum"]:
  cpu = logits.clone().requires_grad_()
  expected = torch.nn.functional.ctc_loss(cpu.log_softmax(-1), targets, input_lengths,
                                          target_lengths, 0, reduction, True)
  expected.backward()

  hpu = logits.to("hpu").requires_grad_()
  got = CTCLoss.apply(hpu.log_softmax(-1), targets.to("hpu"), input_lengths.to("hpu"),
                      target_lengths.to("hpu"), 0, reduction, True)
  got.backward()
  assert got.device.type == "hpu"
  torch.testing.assert_close(got.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
  torch.testing.assert_close(hpu.grad.cpu(), cpu.grad, rtol=1e-5, atol=1e-6)
""")
