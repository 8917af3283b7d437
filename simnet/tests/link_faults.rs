//! Link faults between a peer and a host: delay, hold and repair, cut.

use simnet::{LinkFault, Net, SimStream};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

/// A connected pair: the peer `p`'s end and the host `h`'s end, and the
/// host's listener (connects are refused once it is dropped).
async fn pair(net: &Net) -> (SimStream, SimStream, simnet::SimListener) {
    let mut listener = net.listen("h");
    let client = net.connect(net.peer_addr("p"), "h").unwrap();
    let (server, _) = axum::serve::Listener::accept(&mut listener).await;
    (client, server, listener)
}

async fn read_some(stream: &mut SimStream) -> Vec<u8> {
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).await.unwrap();
    buf[..n].to_vec()
}

#[tokio::test(start_paused = true)]
async fn a_delayed_link_delivers_each_write_that_much_later_in_order() {
    let net = Net::new();
    let (mut client, mut server, _listener) = pair(&net).await;
    net.set_link_fault(
        "p",
        "h",
        "t",
        Some(LinkFault::Delay(Duration::from_millis(200))),
    );
    let start = Instant::now();
    client.write_all(b"ab").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.write_all(b"cd").await.unwrap();
    assert_eq!(read_some(&mut server).await, b"ab");
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(read_some(&mut server).await, b"cd");
    assert_eq!(start.elapsed(), Duration::from_millis(250));
    // The other direction is delayed too.
    server.write_all(b"x").await.unwrap();
    assert_eq!(read_some(&mut client).await, b"x");
    assert_eq!(start.elapsed(), Duration::from_millis(450));
}

#[tokio::test(start_paused = true)]
async fn a_held_link_releases_its_bytes_at_the_repair() {
    let net = Net::new();
    let (mut client, mut server, _listener) = pair(&net).await;
    net.set_link_fault("p", "h", "t", Some(LinkFault::Hold));
    client.write_all(b"held").await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(30), read_some(&mut server)).await;
    assert!(read.is_err(), "nothing arrives while held");
    let net2 = net.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        net2.set_link_fault("p", "h", "t", None);
    });
    let start = Instant::now();
    assert_eq!(read_some(&mut server).await, b"held");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    // Repaired: no delay any more.
    client.write_all(b"now").await.unwrap();
    assert_eq!(read_some(&mut server).await, b"now");
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn a_cut_resets_open_links_and_refuses_connects_until_lifted() {
    let net = Net::new();
    let (mut client, _server, _listener) = pair(&net).await;
    net.set_link_fault("p", "h", "t", Some(LinkFault::Cut));
    assert!(client.write_all(b"x").await.is_err());
    assert!(net.connect(net.peer_addr("p"), "h").is_err());
    // Another peer still gets through.
    assert!(net.connect(net.peer_addr("q"), "h").is_ok());
    net.set_link_fault("p", "h", "t", None);
    assert!(net.connect(net.peer_addr("p"), "h").is_ok());
}

#[tokio::test(start_paused = true)]
async fn faults_of_two_owners_add_up() {
    let net = Net::new();
    net.set_link_fault("p", "h", "partition", Some(LinkFault::Cut));
    net.set_link_fault("p", "h", "attrition", Some(LinkFault::Cut));
    let _listener = net.listen("h");
    net.set_link_fault("p", "h", "attrition", None);
    assert!(
        net.connect(net.peer_addr("p"), "h").is_err(),
        "the partition still holds"
    );
    net.set_link_fault("p", "h", "partition", None);
    assert!(net.connect(net.peer_addr("p"), "h").is_ok());
}
