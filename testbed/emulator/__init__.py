"""The AWS side of the hostkeyctl test bed (a package: ``app`` the WSGI
application, ``ssm`` the command plane and its agent, ``secretsmanager``,
``kms``, ``ec2_tags`` and ``patches`` where moto differs from AWS, ``iam``
the policies enforced).

The moto server (EC2, Secrets Manager, the rest of SSM) runs in-process
behind a WSGI layer that adds what the tests need and moto lacks:

* an SSM command plane that plays the SSM agent: every ``SendCommand`` of
  ``AWS-RunShellScript`` really runs its ``commands`` with bash once per
  targeted instance, in that node's environment, honouring MaxConcurrency,
  MaxErrors and executionTimeout, and ``ListCommandInvocations`` (paginated,
  with Details), ``GetCommandInvocation``, ``ListCommands`` and
  ``CancelCommand`` report it as SSM does;
* fault injection: failing instances, throttling, access denied, latency,
  and invocations that stay invisible for a while after SendCommand
  (eventual consistency);
* counters of API calls by ``service:Action``;
* Elastic Load Balancing v2 and SageMaker HyperPod as the bed sets them up
  (see ``parts.fleet.register_lb_and_cluster``): target health that tests can set
  (moto reports every registered target healthy), HyperPod nodes with EC2-like
  instance ids and the bed's addresses as ``PrivatePrimaryIp`` and
  ``PrivateDnsHostname`` (moto names them ``GROUP-N`` with no address), and
  ``ListClusterNodes`` pagination that works (moto 5.2.1 fails on the second
  page: its nodes have no ``arn``); a node's status and its replacement by
  a successor at a new address (``hyperpod.py``);
* a small control API under ``/_bed/`` (see README.md beside this file).

Facts about SSM reproduced here: at most 50 InstanceIds per SendCommand;
Targets entries are ANDed; GetCommandInvocation cuts stdout at 24,000 and
stderr at 8,000 characters; a plugin's Output in ListCommandInvocations
(Details=true) is stdout, then ``----------ERROR-------`` and stderr, cut at
2,500 characters; when errors exceed MaxErrors no further instance is
started and the rest end Cancelled.
"""

from __future__ import annotations

from moto.core.models import DEFAULT_ACCOUNT_ID as ACCOUNT

from .app import Emulator
from .commands import Faults, NodeEnv

__all__ = ["ACCOUNT", "Emulator", "Faults", "NodeEnv"]
