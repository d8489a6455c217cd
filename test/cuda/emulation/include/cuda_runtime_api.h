// CPU emulation stand-in for the CUDA header of this name (see troupe_cuda_emulation.h).
#pragma once
#include "troupe_cuda_emulation.h"
