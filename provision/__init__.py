"""provision: Ansible-style provisioning of SGLang prefill/decode pairs over NIXL/UCX on plain SSH hosts."""

__version__ = "0.1.0"
__all__ = ["__version__"]
