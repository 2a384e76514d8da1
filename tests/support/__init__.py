"""What the tests share, as a package (never imported from one test module into another):

- ``lab``: the lab of real sshd hosts on loopback (:class:`tests.support.lab.Lab`), and ``systemd_host``;
- ``cli``: the CLI run in-process (``run_cli``, ``run_cli_in``), ``lab_ssh_config`` (THE place that points
  provision at a lab's ssh_config), a recording reporter, a load client for PD deployments;
- ``stack``: the session's full SGLang stack on lab host 0 (the ``sglang_stack`` fixture);
- ``ansible_ref``: ansible-core as the reference of one-machine differential tests (``ansible_results``);
- ``nixl_env``: a venv with the real NIXL wheels, built once and cached (``nixl_python``).
"""
