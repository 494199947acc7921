# Copied unchanged (below these lines) from https://github.com/pytorch/examples
# distributed/ddp-tutorial-series/datautils.py at commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
# BSD 3-Clause License, Copyright (c) 2017, Pytorch contributors: see ../LICENSE.
import torch
from torch.utils.data import Dataset

class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size
    
    def __getitem__(self, index):
        return self.data[index]