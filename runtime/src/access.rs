//! Whether a user holds an [`Access`]: one SubjectAccessReview, asked by the webhook of a CR's
//! author at admission and by the controller of a Scaler's recorded author while it acts.
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::Client;
use kubesteer_api::access::Access;

/// The apiserver's answer: whether `user` (their whole identity: name, uid, groups, extra) may
/// do what `access` says.
pub async fn permitted(client: &Client, user: &UserInfo, access: &Access) -> kube::Result<bool> {
    let optional = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some(access.group.clone()),
                resource: Some(access.resource.clone()),
                subresource: optional(access.subresource),
                verb: Some(access.verb.into()),
                namespace: Some(access.namespace.clone()),
                name: optional(&access.name),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}
