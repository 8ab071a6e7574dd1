//! The watches that fill the [`Inventory`]: which kinds are watched from when, and what each
//! event changes and whom it wakes.
use super::*;

impl Inventory {
    /// Readies the watches of this run: Deployments, StatefulSets and HPAs from the first
    /// Scaler ([`Inventory::watch_workloads`]), other kinds when a selector names them. Objects
    /// that change wake the Scalers that name, hold or select them through `wake`; the watches
    /// end when `stop` turns true.
    pub fn start(
        &self,
        client: Client,
        health: Health,
        namespace: Option<String>,
        wake: UnboundedSender<ObjectRef<Scaler>>,
        stop: watch::Receiver<bool>,
    ) {
        let runner = Runner {
            client,
            health,
            namespace,
            wake,
            stop,
        };
        let _ = self.runner.set(runner);
    }

    /// Starts the watches every Scaler needs, if not already: the Deployments and StatefulSets
    /// (any may be a target, named or selected) and the HPAs (which of them an HPA scales).
    /// Called for each Scaler the Scaler watch sees, so that a cluster with none pays for none.
    pub fn watch_workloads(&self, claims: &Claims) {
        let Some(runner) = self.runner.get().cloned() else {
            return;
        };
        if self.started.set(()).is_err() {
            return;
        }
        self.watch_autoscalers(&runner, claims);
        for (group, version, kind, plural) in WORKLOADS {
            let resource = ApiResource {
                group: group.into(),
                version: version.into(),
                api_version: format!("{group}/{version}"),
                kind: kind.into(),
                plural: plural.into(),
            };
            self.watch(&resource, claims);
        }
    }

    /// Waits (at most `within`) until the Deployments and StatefulSets have been listed whole
    /// once, starting their watches if need be; false when they have not by then.
    pub async fn workloads_listed_within(&self, claims: &Claims, within: Duration) -> bool {
        self.watch_workloads(claims);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.listed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a list in between is not missed.
            notified.as_mut().enable();
            if self.workloads_listed() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.workloads_listed();
            }
        }
    }

    /// Whether the Deployments and StatefulSets have been listed whole once: before that,
    /// [`Inventory::held_by`] may miss a target a Scaler holds by its record. An inventory
    /// never started (a reconcile run on its own) has no watch to wait for.
    pub fn workloads_listed(&self) -> bool {
        if self.runner.get().is_none() {
            return true;
        }
        let state = self.read();
        WORKLOADS.iter().all(|(group, _, kind, _)| {
            state
                .kinds
                .get(&(group.to_string(), kind.to_string()))
                .is_some_and(|o| o.synced)
        })
    }

    /// Watches the kind `resource` from now on, if not already.
    pub fn watch(&self, resource: &ApiResource, claims: &Claims) {
        let Some(runner) = self.runner.get().cloned() else {
            return;
        };
        let key = (resource.group.clone(), resource.kind.clone());
        {
            let mut watching = self.watching.lock().unwrap_or_else(|p| p.into_inner());
            if !watching.insert(key.clone()) {
                return;
            }
        }
        self.write().kinds.insert(
            key.clone(),
            Objects {
                api_version: resource.api_version.clone(),
                ..Objects::default()
            },
        );
        let config = tolerant::config();
        let what = format!("Scaler target {}", resource.kind);
        // The apps/v1 workloads whole (their replicas are in the spec), so that a reconcile
        // reads them from here; other kinds by their metadata.
        let stream = match replicas_in_spec(resource) {
            true => {
                let api: Api<DynamicObject> = match &runner.namespace {
                    Some(ns) => Api::namespaced_with(runner.client.clone(), ns, resource),
                    None => Api::all_with(runner.client.clone(), resource),
                };
                let resource = resource.clone();
                runner
                    .health
                    .track_on_demand(what, health::key(&api, &config), watcher(api, config))
                    .backoff(tolerant::backoff())
                    .map_ok(move |e| {
                        map_event(e, |o: DynamicObject| {
                            let replicas = spec_replicas(&resource, &o).unwrap_or(0);
                            let mut entry = Entry::of(&o.metadata, Some(replicas));
                            if let Some(current) = entry.current.as_mut() {
                                current.requests = template_requests(&o.data["spec"]);
                            }
                            (o.namespace().unwrap_or_default(), o.name_any(), entry)
                        })
                    })
                    .boxed()
            }
            false => {
                let api: Api<PartialObjectMeta<DynamicObject>> = match &runner.namespace {
                    Some(ns) => Api::namespaced_with(runner.client.clone(), ns, resource),
                    None => Api::all_with(runner.client.clone(), resource),
                };
                runner
                    .health
                    .track_on_demand(what, health::key(&api, &config), watcher(api, config))
                    .backoff(tolerant::backoff())
                    .map_ok(|e| {
                        map_event(e, |o: PartialObjectMeta<DynamicObject>| {
                            let entry = Entry::of(&o.metadata, None);
                            (o.namespace().unwrap_or_default(), o.name_any(), entry)
                        })
                    })
                    .boxed()
            }
        };
        let inventory = self.clone();
        let claims = claims.clone();
        let stop = runner.stop.clone();
        let mut relisted: Option<BTreeMap<String, Names>> = None;
        spawn_until_stopped(stream, stop, move |event| match event {
            Ok(event) => inventory.apply(&key, event, &mut relisted, &claims, &runner.wake),
            Err(e) => warn!(kind = %key.1, error = %e, "Scaler target watch"),
        });
    }

    /// Watches the namespaces' labels from now on, if not already (a namespaceSelector).
    pub fn watch_namespaces(&self, claims: &Claims) {
        let Some(runner) = self.runner.get().cloned() else {
            return;
        };
        {
            let mut state = self.write();
            if state.namespaces.is_some() {
                return;
            }
            state.namespaces = Some(HashMap::new());
        }
        let api: Api<PartialObjectMeta<Namespace>> = Api::all(runner.client.clone());
        let config = tolerant::config();
        let stream = runner
            .health
            .track_on_demand(
                "Scaler namespaces",
                health::key(&api, &config),
                watcher(api, config),
            )
            .backoff(tolerant::backoff());
        let inventory = self.clone();
        let claims = claims.clone();
        let stop = runner.stop.clone();
        spawn_until_stopped(stream, stop, move |event| {
            let Ok(event) = event else { return };
            let changed = match &event {
                Event::Apply(ns) | Event::InitApply(ns) => Some(ns),
                Event::Delete(ns) => Some(ns),
                _ => None,
            };
            if let Some(ns) = changed {
                let mut state = inventory.write();
                let map = state.namespaces.get_or_insert_with(HashMap::new);
                match &event {
                    Event::Delete(_) => map.remove(&ns.name_any()),
                    _ => map.insert(ns.name_any(), ns.labels().clone()),
                };
            }
            // A namespace's labels changed: every Scaler selecting by them looks again.
            if matches!(event, Event::Apply(_) | Event::InitDone) {
                let index = claims.read();
                for (c, s) in index.selectors() {
                    if s.namespace_selector.is_some() {
                        let _ = runner
                            .wake
                            .unbounded_send(ObjectRef::new(&c.name).within(&c.namespace));
                    }
                }
            }
        });
    }

    /// Watches the HorizontalPodAutoscalers, to know which targets none scales (most of a
    /// fleet): those need no read of their namespace's HPAs. A change wakes the Scalers of the
    /// target it scales.
    fn watch_autoscalers(&self, runner: &Runner, claims: &Claims) {
        let api: Api<HorizontalPodAutoscaler> = match &runner.namespace {
            Some(ns) => Api::namespaced(runner.client.clone(), ns),
            None => Api::all(runner.client.clone()),
        };
        let config = tolerant::config();
        let stream = runner
            .health
            .track_on_demand(
                "Scaler target HorizontalPodAutoscaler",
                health::key(&api, &config),
                watcher(api, config),
            )
            .backoff(tolerant::backoff());
        let inventory = self.clone();
        let claims = claims.clone();
        let runner = runner.clone();
        let stop = runner.stop.clone();
        let mut relisted: Option<Autoscaled> = None;
        // Each HPA's target as last seen, to take it off when the HPA changes or goes.
        let mut seen: HashMap<(String, String), Scaled> = HashMap::new();
        spawn_until_stopped(stream, stop, move |event| {
            let Ok(event) = event else { return };
            let scaled = |h: &HorizontalPodAutoscaler| {
                let r = &h.spec.as_ref()?.scale_target_ref;
                let group = kubesteer_api::scaler::target::group_of(
                    r.api_version.as_deref().unwrap_or_default(),
                );
                Some((group.to_string(), r.kind.clone(), r.name.clone()))
            };
            let key =
                |h: &HorizontalPodAutoscaler| (h.namespace().unwrap_or_default(), h.name_any());
            let mut woken = Vec::new();
            match event {
                Event::Init => {
                    relisted = Some(HashMap::new());
                    seen.clear();
                }
                Event::InitApply(h) => {
                    inventory.remember_keda(&h);
                    if let Some(t) = scaled(&h) {
                        let (ns, _) = key(&h);
                        *relisted
                            .get_or_insert_with(HashMap::new)
                            .entry(ns)
                            .or_default()
                            .entry(t.clone())
                            .or_default() += 1;
                        seen.insert(key(&h), t);
                    }
                }
                Event::InitDone => {
                    inventory.write().autoscaled = Some(relisted.take().unwrap_or_default());
                }
                Event::Apply(h) => {
                    inventory.remember_keda(&h);
                    let (ns, name) = key(&h);
                    let before = seen.remove(&(ns.clone(), name.clone()));
                    let after = scaled(&h);
                    inventory.count(&ns, before.as_ref(), after.as_ref());
                    if let Some(t) = &after {
                        seen.insert((ns.clone(), name), t.clone());
                    }
                    woken.extend(
                        [before, after]
                            .into_iter()
                            .flatten()
                            .map(|t| (ns.clone(), t)),
                    );
                }
                Event::Delete(h) => {
                    let (ns, name) = key(&h);
                    let before = seen.remove(&(ns.clone(), name));
                    inventory.count(&ns, before.as_ref(), None);
                    woken.extend(before.map(|t| (ns, t)));
                }
            }
            for (ns, (group, kind, name)) in woken {
                inventory.wake_for(&claims, &runner.wake, &group, &kind, &ns, &name);
            }
        });
    }

    /// Remembers the ScaledObject that owns `hpa`, if one does, for the target it scales.
    fn remember_keda(&self, hpa: &HorizontalPodAutoscaler) {
        let Some(so) = kubesteer_api::scaler::v1beta1::keda_owner(hpa.owner_references()) else {
            return;
        };
        let Some(r) = hpa.spec.as_ref().map(|s| &s.scale_target_ref) else {
            return;
        };
        let group =
            kubesteer_api::scaler::target::group_of(r.api_version.as_deref().unwrap_or_default());
        let key = (
            hpa.namespace().unwrap_or_default(),
            group.to_string(),
            r.kind.clone(),
            r.name.clone(),
        );
        self.write().keda.insert(key, so.to_string());
    }

    /// Moves one HPA's count from the target `before` to `after` in `ns`.
    fn count(&self, ns: &str, before: Option<&Scaled>, after: Option<&Scaled>) {
        let mut state = self.write();
        let Some(autoscaled) = state.autoscaled.as_mut() else {
            return;
        };
        let targets = autoscaled.entry(ns.to_string()).or_default();
        if let Some(t) = before {
            if let Some(n) = targets.get_mut(t) {
                *n -= 1;
                if *n == 0 {
                    targets.remove(t);
                }
            }
        }
        if let Some(t) = after {
            *targets.entry(t.clone()).or_default() += 1;
        }
    }

    /// Wakes the Scalers that name, claim or select the object `group`/`kind` `ns`/`name`.
    fn wake_for(
        &self,
        claims: &Claims,
        wake: &UnboundedSender<ObjectRef<Scaler>>,
        group: &str,
        kind: &str,
        ns: &str,
        name: &str,
    ) {
        let index = claims.read();
        let state = self.read();
        let target = Target {
            group: group.into(),
            version: String::new(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        };
        let mut woken: BTreeSet<&Claimant> = index.claimants(&target).collect();
        let entry = state
            .kinds
            .get(&(group.to_string(), kind.to_string()))
            .and_then(|o| o.by_namespace.get(ns))
            .and_then(|n| n.get(name));
        let labels = entry.map(|e| e.labels.map());
        let candidate = labels.as_ref().map(|labels| Candidate {
            group,
            kind,
            namespace: ns,
            name,
            labels,
            namespace_labels: state.namespaces.as_ref().and_then(|n| n.get(ns)),
        });
        if let Some(candidate) = &candidate {
            woken.extend(index.selectors_of(candidate));
        }
        for c in woken {
            let _ = wake.unbounded_send(ObjectRef::new(&c.name).within(&c.namespace));
        }
    }

    /// Keeps one watch event and wakes the Scalers it concerns: those that name or claim the
    /// object, hold its record, or select it before or after the change.
    fn apply(
        &self,
        key: &KindKey,
        event: Event<Kept>,
        relisted: &mut Option<BTreeMap<String, Names>>,
        claims: &Claims,
        wake: &UnboundedSender<ObjectRef<Scaler>>,
    ) {
        let mut woken: BTreeSet<Claimant> = BTreeSet::new();
        let mut touched = Vec::new();
        match event {
            Event::Init => *relisted = Some(BTreeMap::new()),
            Event::InitApply((ns, name, entry)) => {
                relisted
                    .get_or_insert_with(BTreeMap::new)
                    .entry(ns)
                    .or_default()
                    .insert(name.into(), entry);
            }
            Event::InitDone => {
                // Built again from the sorted entries, each map's nodes come out full, where
                // inserting in order leaves them about half empty.
                let fresh = relisted.take().unwrap_or_default();
                let fresh = fresh
                    .into_iter()
                    .map(|(ns, names)| (ns, names.into_iter().collect()))
                    .collect();
                let mut state = self.write();
                if let Some(objects) = state.kinds.get_mut(key) {
                    objects.by_namespace = fresh;
                    objects.synced = true;
                }
                drop(state);
                self.listed.notify_waiters();
                // Listed whole: every Scaler selecting this kind looks again.
                let index = claims.read();
                for (c, s) in index.selectors() {
                    let selects_kind = s.kinds().iter().any(|(v, k)| {
                        kubesteer_api::scaler::target::group_of(v) == key.0 && *k == key.1
                    });
                    if selects_kind {
                        woken.insert(c.clone());
                    }
                }
            }
            Event::Apply((ns, name, entry)) => {
                let before = self.put(key, &ns, &name, Some(entry.clone()));
                touched.push((ns, name, before, Some(entry)));
            }
            Event::Delete((ns, name, _)) => {
                let before = self.put(key, &ns, &name, None);
                touched.push((ns, name, before, None));
            }
        }
        if !touched.is_empty() {
            let index = claims.read();
            let state = self.read();
            for (ns, name, before, after) in &touched {
                let ns_labels = state.namespaces.as_ref().and_then(|n| n.get(ns));
                let target = Target {
                    group: key.0.clone(),
                    version: String::new(),
                    kind: key.1.clone(),
                    namespace: ns.clone(),
                    name: name.clone(),
                };
                woken.extend(index.claimants(&target).cloned());
                for entry in [before, after].into_iter().flatten() {
                    let labels = entry.labels.map();
                    let candidate = Candidate {
                        group: &key.0,
                        kind: &key.1,
                        namespace: ns,
                        name,
                        labels: &labels,
                        namespace_labels: ns_labels,
                    };
                    woken.extend(index.selectors_of(&candidate).cloned());
                    if let Some((hns, hname)) =
                        entry.holder.as_deref().and_then(|h| h.split_once('/'))
                    {
                        let _ = wake.unbounded_send(ObjectRef::new(hname).within(hns));
                    }
                }
            }
        }
        for c in woken {
            let _ = wake.unbounded_send(ObjectRef::new(&c.name).within(&c.namespace));
        }
    }

    /// Sets (or, with None, removes) one object's entry; returns the one it replaced.
    fn put(&self, key: &KindKey, ns: &str, name: &str, entry: Option<Entry>) -> Option<Entry> {
        let mut state = self.write();
        let objects = state.kinds.get_mut(key)?;
        match entry {
            Some(e) => objects
                .by_namespace
                .entry(ns.to_string())
                .or_default()
                .insert(name.into(), e),
            None => {
                let names = objects.by_namespace.get_mut(ns)?;
                let before = names.remove(name);
                if names.is_empty() {
                    objects.by_namespace.remove(ns);
                }
                before
            }
        }
    }
}

/// Hands each item of `stream` to `each`, on a task of its own, until the stream ends or
/// `stop` turns true.
fn spawn_until_stopped<S, T>(
    stream: S,
    mut stop: watch::Receiver<bool>,
    mut each: impl FnMut(T) + Send + 'static,
) where
    S: futures::Stream<Item = T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            let item = tokio::select! {
                e = stream.next() => e,
                _ = stop.wait_for(|s| *s) => None,
            };
            let Some(item) = item else { break };
            each(item);
        }
    });
}
