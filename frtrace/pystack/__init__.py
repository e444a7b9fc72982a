"""Python stacks collected from the ranks of a hung job: read them, find the user's frame,
group the ranks by stack (as STAT does for MPI).

stdlib only; nothing here imports torch.
"""
