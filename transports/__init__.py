"""Transport plugins for qccl. qlink: QwenGPUs connected by forwarding their store records."""
