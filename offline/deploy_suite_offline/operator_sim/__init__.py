"""A stand-in for the Dynamo operator on the offline cluster (run inside the controllers process).

The real operator cannot run here (its Go module is not served by the proxy, and it needs
webhooks), so this package reproduces its *observable* contract, level-based like a controller:

* per DGD component an ``apps/v1`` Deployment ``<dgd>-<lowercased component>`` (multinode:
  replicas x nodeCount pods), whose pods carry the operator's labels and the DGD's pod spec (image,
  command, args, env + DYN_NAMESPACE/DYN_COMPONENT/DYN_DISCOVERY_BACKEND, envFrom, ``nvidia.com/gpu``
  requests and limits, scheduling, pull secrets, PVC volumes, /dev/shm); the real scheduler, the
  Deployment controller and kwok do the rest;
* a frontend Service ``<dgd>-<frontend component>`` on port 8000 (``http``);
* ownerReferences on every child, so deleting the DGD cascades through the real garbage collector;
* status written through the status subresource as the operator writes it (state, the Ready
  condition with its reasons, observedGeneration, per-service/component replica counts), and
  reconciliation errors reported as state ``failed`` with the error text.

On top, the serving wiring: each DGD with a frontend (or a gaie graph) gets a real Dynamo
frontend + mocker on 127.0.0.1, and kwok ``PortForward`` / ``Logs`` objects point the frontend
pods' port 8000 and ``kubectl logs`` at them.

Which operator generation it plays is a profile (``0.9``, ``1.x``, ``latest``), with the
facts of each in ``docs/offline-cluster.md``.

The modules, one seam each:

* :mod:`.profiles`: the profiles (API versions, observedGeneration, webhook, DCDs, finalizer);
* :mod:`.components`: the newest path's DCDs, worker hash and per-component Services (pure);
* :mod:`.multinode`: LeaderWorkerSets for multinode components, and the pods LWS would make;
* :mod:`.grove`: the Grove path (PodCliqueSet, PodCliques, scaling groups, gated pods, PodGang);
* :mod:`.admission`: the validating webhook's DGD rules and messages (pure);
* :mod:`.conversion`: DGD conversion v1alpha1 <-> v1beta1 for the opt-in conversion webhook (pure);
* :mod:`.faultswitch`: operator-side fault switches (transient ``failed``, invalid template);

* :mod:`.plan`: what children a DGD asks for, computed from the object alone (pure);
* :mod:`.controller`: the watch loops, the work queue, reconcile and the status writes
  (:class:`~.controller.OperatorSim` is what ``deploy_suite_offline.controllers`` runs);
* :mod:`.serving`: starting, adopting and stopping the Dynamo processes of a DGD and wiring its
  pods to them.

The shape of a DGD is decided by content (``spec.services`` is v1alpha1, ``spec.components``
v1beta1): without the real conversion webhook, both API versions serve the same stored object.
"""
